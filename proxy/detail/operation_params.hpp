#pragma once
// The body of POST /v1/operations/{name}, {"params": [...]}, as the statement's text
// parameters. Pure and thread-agnostic. One pass of the JSON reader (json_reader.hpp)
// and no JSON tree: parsing stops at the first parameter beyond the statement's count, so the time
// and memory a body costs are bounded by the body and that count, never by what the
// client sends after it. The conversion of one parameter (param_value) is shared with
// the `operation` ops of POST /v1/transactions (proxy/detail/txn_body.hpp).

#include "backends/text_params.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::proxy::detail {

// PostgreSQL's limit on a statement's parameters (the Bind message counts them in 16
// bits): the cap while a statement's own count is not known yet.
inline constexpr std::size_t max_statement_params = 65535;
// Nesting (the body's object and the params array included) deeper than this is refused:
// no SQL parameter needs it.
inline constexpr std::size_t max_params_depth = 32;

struct operation_params {
    // When error is empty. Its buffer is as large as the body: shrink_to_fit() it once the
    // body is released (shrinking copies the values, which should not coexist with it).
    store::text_params values;
    std::string error; // why the body is refused (→ 400)
};

// `takes`: the statement's parameter count, or nullopt while it is not known (then at
// most max_statement_params, and the store checks the count). Each parameter becomes its
// text as written, never a rounded or re-formatted value: strings without quotes or
// escapes (a NUL is refused), null as SQL NULL (nullopt), numbers and true/false as their
// JSON tokens, arrays and objects as compact JSON keeping every number's own text. The
// server casts the text to the parameter's type.
// Refused: anything but an object whose one key "params" holds an array; a duplicate key
// at any depth (inside a parameter, found when its object closes); nesting deeper than
// max_params_depth; a number beyond ±1.8e308 (the JSON parser cannot hold it; sent as a
// string it reaches the server intact); a parameter count other than `takes` (parsing
// stops at the first extra parameter). `name` is the operation's, for the messages.
operation_params parse_operation_params(std::string_view body, std::optional<std::size_t> takes,
                                        std::string_view name);

// One parameter, converted as parse_operation_params describes, from the events of its
// JSON value (json_events): begin(), then the value's events (the handler's callbacks of the same
// names), until done(). A caller feeds it the elements of a params array one at a time.
// Every callback returns false on a refusal, with `error` saying why. The value is
// written straight into the text_params given to begin(), an array or object as its
// compact JSON while it is read: no copy of it is held anywhere else (issue 45: a copy
// built in a string of its own, then packed, held up to 3 times the parameter for a
// moment as that string doubled).
class param_value {
public:
    // `base_depth`: the nesting of the array holding the parameter (2 in an operation's
    // body: its object and "params"); the value may nest up to max_params_depth in all.
    explicit param_value(std::size_t base_depth) noexcept : base_depth_(base_depth) {}

    // A new parameter starts; `number` (1-based) names it in messages. Once done(), it is
    // the last value of `out`, which must outlive the parameter; after a refusal, `out`
    // may hold part of it and is to be dropped.
    void begin(std::size_t number, store::text_params& out);
    // The value is complete, in `out`.
    bool done() const noexcept { return done_; }

    bool null() { return scalar(std::nullopt); }
    bool boolean(bool v) { return scalar(v ? "true" : "false"); }
    // "-0" is the only signed zero the reader sends as an integer: every other integer
    // has exactly one JSON spelling, which its value gives back.
    bool number_integer(std::int64_t v) {
        return scalar(v == 0 ? std::string{"-0"} : std::to_string(v));
    }
    bool number_unsigned(std::uint64_t v) { return scalar(std::to_string(v)); }
    // `text` is the number as written: a value beyond int64/uint64 or a double's
    // precision arrives intact.
    bool number_float(double, std::string_view text) { return scalar(text); }
    bool string(std::string_view v);
    bool start_object() { return open(true); }
    bool start_array() { return open(false); }
    bool end_object() { return close('}'); }
    bool end_array() { return close(']'); }
    bool key(std::string_view k);

    std::string error;

private:
    struct frame {
        bool is_object = false;
        bool first = true;
        std::size_t keys = 0; // objects: where their keys begin in key_at_
    };

    bool fail(std::string message);
    std::string& text() noexcept { return out_->raw(); }
    void separate();
    bool scalar(std::optional<std::string_view> v, bool is_string = false);
    bool open(bool is_object);
    bool close(char c);
    std::string_view key_text(std::uint32_t at) const noexcept;
    bool unique_keys(std::size_t from);

    std::size_t base_depth_;
    std::size_t number_ = 0;
    bool done_ = false;
    store::text_params* out_ = nullptr;
    std::size_t start_ = 0; // where the parameter's text begins in out_->raw()
    std::vector<frame> frames_;
    // Where each key of the open objects begins, from start_, innermost object last: 4
    // bytes a key, checked for duplicates when its object closes (issue 45: a std::set of
    // the keys cost about 64 bytes a key, 9 times the body of {"aa":0,"ab":0,...}). A
    // deque, which grows by blocks: a vector would hold up to 3 times its keys for a
    // moment as it doubled.
    std::deque<std::uint32_t> key_at_;
};

} // namespace fk::proxy::detail
