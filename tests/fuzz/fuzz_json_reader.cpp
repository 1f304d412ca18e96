// Fuzzes the JSON reader of the request bodies (proxy/detail/json_reader.hpp) against
// nlohmann's SAX parser, which it replaced there (issue 45) and which stays the oracle:
// on every input, the same verdict, the same events in the same order (strings byte for
// byte, doubles bit for bit, each number's own text) and the same kind of error. The one
// deliberate difference, a NUL byte that nlohmann takes for the end of the text, is
// allowed where it is the reason (tests/support/json_event_log.hpp). The input is the
// text itself.

#include "tests/fuzz/fuzz_check.hpp"
#include "tests/support/json_event_log.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text{reinterpret_cast<const char*>(data), size};
    const auto ours = fk::test::read_with_reader(text);
    const auto theirs = fk::test::read_with_nlohmann(text);
    FK_FUZZ_CHECK(ours.events == theirs.events);
    if (!fk::test::nul_ends_nlohmann(text, ours, theirs)) {
        FK_FUZZ_CHECK(ours.accepted == theirs.accepted);
        FK_FUZZ_CHECK(ours.error == theirs.error);
    }
    return 0;
}
