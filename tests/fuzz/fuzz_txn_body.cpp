// Fuzzes the parsers of the two bodies that carry SQL parameters, POST /v1/transactions
// (proxy/detail/txn_body.hpp) and POST /v1/operations/{name}
// (proxy/detail/operation_params.hpp), with the memory they allocate as the oracle: the
// bound docs/operations.md ("Memory") promises per request rests on both keeping no more
// than a small multiple of their input (issue 45: 8 MiB of "1," parameters once became
// 170 MB). Every allocation goes through the counting operator new of
// tests/support/alloc_count.hpp; a parse whose peak exceeds max_growth × the input +
// max_fixed aborts. Strings and numbers are read in place (proxy/detail/json_reader.hpp):
// nothing is allowed apart for the token being read, as it was while nlohmann's lexer
// read them (it held a long string 4 to 8.7 times over).
//
// Also checked: a transaction naming an operation the store does not have keeps no
// parameter; held_bytes covers what the ops hold; a parse never throws.
//
// Input layout: byte 0 chooses the rules (bit 0: the store has operations; bit 1: the
// operation "two" declares its count, 2; bit 2: a Fencing-Token default; bit 3: a
// Fencing-Lock default; bit 4: the params route's count is known, 2); the rest is the body,
// given to both parsers.

#include "proxy/detail/operation_params.hpp"
#include "proxy/detail/txn_body.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/support/alloc_count.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace {

// A parse may keep up to this multiple of its input, plus a fixed allowance for what does
// not grow with it (the handler, up to max_ops ops' structs).
constexpr std::size_t max_growth = 3;
constexpr std::size_t max_fixed = 64 * 1024;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1)
        return 0;
    namespace d = fk::proxy::detail;
    using fk::fuzz::live_bytes;
    using fk::fuzz::peak_bytes;
    const std::uint8_t mode = data[0];
    const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
    const std::size_t bound = max_growth * body.size() + max_fixed;

    {
        d::txn_body_rules rules;
        rules.operations = (mode & 1) != 0;
        if (mode & 2)
            rules.param_count = [](const std::string& name) {
                return name == "two" ? std::optional<std::size_t>{2} : std::nullopt;
            };
        rules.known = [](const std::string& name) { return name == "two" || name == "any"; };
        if (mode & 4)
            rules.token = 7;
        if (mode & 8)
            rules.lock = "l";
        const std::size_t before = live_bytes();
        fk::fuzz::reset_peak();
        auto parsed = d::parse_txn_body(body, rules);
        fk::fuzz::report("txn body", body.size(), before, bound);
        FK_FUZZ_CHECK(peak_bytes() - before <= bound);
        FK_FUZZ_CHECK(live_bytes() - before <= bound);
        if (parsed.error == fk::errc::ok) {
            FK_FUZZ_CHECK(!parsed.ops.empty());
            FK_FUZZ_CHECK(parsed.held_bytes <= bound);
            for (const auto& op : parsed.ops) {
                if (parsed.unknown_operation)
                    FK_FUZZ_CHECK(op.params.empty());
                if (op.name == "two" && (mode & 2) && !parsed.unknown_operation)
                    FK_FUZZ_CHECK(op.params.size() == 2);
            }
            if (parsed.unknown_operation) {
                FK_FUZZ_CHECK(*parsed.unknown_operation < parsed.ops.size());
                const auto& op = parsed.ops[*parsed.unknown_operation];
                FK_FUZZ_CHECK(op.op == fk::store::txn_op::kind::operation);
                FK_FUZZ_CHECK(op.name != "two" && op.name != "any");
            }
        } else {
            FK_FUZZ_CHECK(parsed.ops.empty());
            FK_FUZZ_CHECK(!parsed.unknown_operation);
            FK_FUZZ_CHECK(!parsed.message.empty());
        }
    }
    {
        const std::optional<std::size_t> takes =
            (mode & 16) ? std::optional<std::size_t>{2} : std::nullopt;
        const std::size_t before = live_bytes();
        fk::fuzz::reset_peak();
        auto params = d::parse_operation_params(body, takes, "op");
        fk::fuzz::report("operation params", body.size(), before, bound);
        FK_FUZZ_CHECK(peak_bytes() - before <= bound);
        if (params.error.empty() && takes)
            FK_FUZZ_CHECK(params.values.size() == 2);
        if (!params.error.empty())
            FK_FUZZ_CHECK(params.values.empty());
    }
    return 0;
}
