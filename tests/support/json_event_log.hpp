#pragma once
// The events of one JSON text, as read by fencekeeper's JSON reader
// (proxy/detail/json_reader.hpp) and by nlohmann's SAX parser, written as one line each so
// that the two logs compare with ==. The reader promises nlohmann's accepting set and
// events; tests/unit/proxy_json_reader_test.cpp and tests/fuzz/fuzz_json_reader.cpp hold
// it to that.

#include "proxy/detail/json_reader.hpp"

#include <nlohmann/json.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fk::test {

struct json_event_log {
    std::vector<std::string> events;
    bool accepted = false;
    // The error, when refused: "syntax" or "number_overflow", and its position.
    std::string error;
    std::size_t position = 0;

    void add(std::string_view what, std::string_view payload = {}) {
        std::string e{what};
        e += std::to_string(payload.size());
        e += ':';
        e += payload;
        events.push_back(std::move(e));
    }
    void add_float(double v, std::string_view text) {
        add("f" + std::to_string(std::bit_cast<std::uint64_t>(v)), text);
    }
};

class reader_log final : public fk::proxy::detail::json_events {
public:
    json_event_log log;
    bool null() override { return log.add("n"), true; }
    bool boolean(bool v) override { return log.add(v ? "t" : "F"), true; }
    bool number_integer(std::int64_t v) override { return log.add("i" + std::to_string(v)), true; }
    bool number_unsigned(std::uint64_t v) override {
        return log.add("u" + std::to_string(v)), true;
    }
    bool number_float(double v, std::string_view text) override {
        return log.add_float(v, text), true;
    }
    bool string(std::string_view v) override { return log.add("s", v), true; }
    bool key(std::string_view k) override { return log.add("k", k), true; }
    bool start_object() override { return log.add("{"), true; }
    bool end_object() override { return log.add("}"), true; }
    bool start_array() override { return log.add("["), true; }
    bool end_array() override { return log.add("]"), true; }
    bool parse_error(std::size_t position, fk::proxy::detail::json_error e) override {
        log.error =
            e == fk::proxy::detail::json_error::number_overflow ? "number_overflow" : "syntax";
        log.position = position;
        return false;
    }
};

struct nlohmann_log {
    json_event_log log;
    bool null() { return log.add("n"), true; }
    bool boolean(bool v) { return log.add(v ? "t" : "F"), true; }
    bool number_integer(std::int64_t v) { return log.add("i" + std::to_string(v)), true; }
    bool number_unsigned(std::uint64_t v) { return log.add("u" + std::to_string(v)), true; }
    bool number_float(double v, const std::string& text) { return log.add_float(v, text), true; }
    bool string(std::string& v) { return log.add("s", v), true; }
    bool binary(nlohmann::json::binary_t&) { return log.add("binary"), true; }
    bool key(std::string& k) { return log.add("k", k), true; }
    bool start_object(std::size_t) { return log.add("{"), true; }
    bool end_object() { return log.add("}"), true; }
    bool start_array(std::size_t) { return log.add("["), true; }
    bool end_array() { return log.add("]"), true; }
    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception& e) {
        log.error = e.id == 406 ? "number_overflow" : "syntax";
        log.position = position;
        return false;
    }
};

// The one difference, deliberate: nlohmann's lexer takes a NUL byte where a token starts
// for the end of the text, so it accepts "{}\0" and "1\0anything"; the reader refuses
// anything after the value but whitespace. True when that is why the verdicts differ:
// nlohmann accepted, and the reader refused at a NUL byte.
inline bool nul_ends_nlohmann(std::string_view text, const json_event_log& ours,
                              const json_event_log& theirs) {
    return theirs.accepted && !ours.accepted && ours.error == "syntax" && ours.position >= 1 &&
           ours.position <= text.size() && text[ours.position - 1] == '\0';
}

inline json_event_log read_with_reader(std::string_view text) {
    reader_log r;
    r.log.accepted = fk::proxy::detail::read_json(text, r);
    return std::move(r.log);
}

inline json_event_log read_with_nlohmann(std::string_view text) {
    nlohmann_log n;
    n.log.accepted = nlohmann::json::sax_parse(text.begin(), text.end(), &n);
    return std::move(n.log);
}

} // namespace fk::test
