#pragma once
// The body of POST /v1/operations/{name}, {"params": [...]}, as the statement's text
// parameters. Pure and thread-agnostic. One pass of nlohmann's SAX parser and no JSON
// tree: parsing stops at the first parameter beyond the statement's count, so the time
// and memory a body costs are bounded by the body and that count, never by what the
// client sends after it.

#include <cstddef>
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
    std::vector<std::optional<std::string>> values; // when error is empty
    std::string error;                              // why the body is refused (→ 400)
};

// `takes`: the statement's parameter count, or nullopt while it is not known (then at
// most max_statement_params, and the store checks the count). Each parameter becomes its
// text as written, never a rounded or re-formatted value: strings without quotes or
// escapes (a NUL is refused), null as SQL NULL (nullopt), numbers and true/false as their
// JSON tokens, arrays and objects as compact JSON keeping every number's own text. The
// server casts the text to the parameter's type.
// Refused: anything but an object whose one key "params" holds an array; a duplicate key
// at any depth; nesting deeper than max_params_depth; a number beyond ±1.8e308 (the JSON
// parser cannot hold it; sent as a string it reaches the server intact); a parameter
// count other than `takes` (parsing stops at the first extra parameter).
// `name` is the operation's, for the messages.
operation_params parse_operation_params(std::string_view body, std::optional<std::size_t> takes,
                                        std::string_view name);

} // namespace fk::proxy::detail
