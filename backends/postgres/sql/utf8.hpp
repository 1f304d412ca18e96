#pragma once
// The UTF-8 successor of a listing prefix: the upper bound of a prefix scan. Pure; safe
// from any thread.

#include <optional>
#include <string>
#include <string_view>

namespace fk::store::pg::sql {

// The smallest string that is bytewise greater than every string starting with `prefix`
// and still valid UTF-8 (the last code point incremented, skipping surrogates); nullopt
// when there is none (empty prefix, or only U+10FFFF). Bytewise order of UTF-8 equals code
// point order, so [prefix, successor) is exactly the set of strings with that prefix.
std::optional<std::string> prefix_successor(std::string_view prefix);

} // namespace fk::store::pg::sql
