#pragma once
// What nlohmann's SAX lexer allocates on its own, which the memory harnesses
// (fuzz_txn_body, fuzz_session) allow for apart from the parsers' bound: it keeps the
// token being read twice (as read, and decoded), each growing by doubling, and on a
// syntax error copies the token read so far into its exception's message three times
// more. A 600 KB string costs up to about 5 times its size while read, 8 times when it
// ends in a syntax error (docs/fuzzing.md); with a lexer of our own that handed strings
// over as views of the body, this would go.

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace fk::fuzz {

inline constexpr std::size_t lexer_growth = 8;

// An upper bound on the longest token nlohmann's lexer can hold of `text` (a body, or
// the requests of a connection): the longest string, as written, and the longest run of
// the characters of a number. A head's end (CR LF CR LF) starts a body, outside any
// string. Chunk lines inside a string are counted with it, as if they were part of it; a
// string ends at its closing quote, or where the text does (or a head ends: nlohmann
// stops at the CR already, a control character, which no string may hold raw).
inline std::size_t longest_token(std::string_view text) {
    std::size_t longest = 0, run = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text.substr(i, 4) == "\r\n\r\n") {
            in_string = false;
            run = 0;
            i += 3;
            continue;
        }
        const char c = text[i];
        if (in_string) {
            if (c == '"') {
                in_string = false;
                run = 0;
                continue;
            }
            ++run;
            if (c == '\\' && i + 1 < text.size()) { // the escaped character, whatever it is
                ++run;
                ++i;
            }
        } else if (c == '"') {
            in_string = true;
            run = 0;
        } else if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' ||
                   c == 'E') {
            ++run;
        } else {
            run = 0;
        }
        longest = std::max(longest, run);
    }
    return longest;
}

} // namespace fk::fuzz
