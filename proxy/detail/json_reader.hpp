#pragma once
// The JSON reader of the two request bodies that are parsed as JSON (POST
// /v1/transactions and POST /v1/operations/{name}): one pass over a body held whole in
// memory, SAX events, and no copy of what it reads. A string without escapes is handed
// over as a view of the body; one with escapes is decoded into one buffer reserved at
// its escaped length (never grown by doubling); numbers are converted in place.
//
// Why not nlohmann's SAX parser, which the rest of the code uses: its lexer keeps the
// token it reads twice (as read and decoded), each growing by doubling, and on a syntax
// error copies it into its exception three times more: a body that is one long string
// took 4 to 8.7 times its size to parse (issue 45, docs/fuzzing.md). Here a string costs
// what its handler keeps of it, plus its decoded copy when it has escapes.
//
// What it accepts and the events it sends are nlohmann's (RFC 8259, strict UTF-8, a byte
// order mark skipped, nothing after the value but whitespace; integers as int64/uint64
// when they fit, else as doubles; a number beyond a double's range refused), checked
// event by event against nlohmann on every input by tests/fuzz/fuzz_json_reader.cpp.
// Pure and thread-agnostic.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fk::proxy::detail {

enum class json_error {
    syntax,          // not JSON
    number_overflow, // a number beyond ±1.8e308 (nlohmann's error 406)
};

// The events of one value, in document order. Each returns false to stop reading at
// once. A view is valid until the callback returns.
class json_events {
public:
    virtual bool null() = 0;
    virtual bool boolean(bool v) = 0;
    // An integer with a sign ("-0" included) that fits in int64.
    virtual bool number_integer(std::int64_t v) = 0;
    // An integer without a sign that fits in uint64.
    virtual bool number_unsigned(std::uint64_t v) = 0;
    // Any other number; `text` is the number as written.
    virtual bool number_float(double v, std::string_view text) = 0;
    virtual bool string(std::string_view v) = 0;
    virtual bool key(std::string_view k) = 0;
    virtual bool start_object() = 0;
    virtual bool end_object() = 0;
    virtual bool start_array() = 0;
    virtual bool end_array() = 0;
    // Reading failed at byte `position` (1-based; the text's size + 1 at its end). The
    // events before it were sent; read_json returns what this returns.
    virtual bool parse_error(std::size_t position, json_error e) = 0;

protected:
    ~json_events() = default;
};

// Reads `text` as one JSON value. True when it was read to its end and every event
// returned true.
bool read_json(std::string_view text, json_events& events);

} // namespace fk::proxy::detail
