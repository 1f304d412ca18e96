#include "proxy/detail/json_reader.hpp"

#include "fence/hex.hpp"
#include "fence/utf8.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace fk::proxy::detail {

namespace {

bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}

class reader {
public:
    reader(std::string_view text, json_events& events) : t_(text), e_(events) {}

    bool run();

private:
    // An error found at t_[at] (at == size: the end of the text).
    bool fail(std::size_t at) { return e_.parse_error(at + 1, json_error::syntax); }

    char peek() const noexcept { return i_ < t_.size() ? t_[i_] : '\0'; }
    bool at_end() const noexcept { return i_ >= t_.size(); }
    void skip_whitespace() noexcept {
        while (i_ < t_.size() &&
               (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r'))
            ++i_;
    }

    // t_[i_] is '"'. On success, `out` is the decoded string and i_ is past its quote;
    // on failure, error_at_ is where.
    bool read_string(std::string_view& out);
    void start_decoding(std::size_t from);
    bool read_escape();
    bool read_hex4(std::size_t at, unsigned& v);
    // A scalar starting at i_: read and sent (ok), sent and refused by its callback
    // (stop), or not one (error, with error_at_ and overflow_ set).
    enum class step { ok, stop, error };
    step scalar();
    step number();
    step literal(std::string_view word);

    std::string_view t_;
    json_events& e_;
    std::size_t i_ = 0;
    std::size_t error_at_ = 0;
    bool overflow_ = false; // the error is a number beyond a double's range
    std::string decoded_;   // the last string with escapes
    // A long decoded string is not kept for the next one: its handler has copied what it
    // keeps of it, and the two would otherwise live side by side until the end (the
    // transaction parser packs an op's parameters into a buffer of their size at the op's
    // end, while this one still held the last of them).
    void release_decoded() {
        if (decoded_.capacity() > 64 * 1024)
            std::string{}.swap(decoded_);
    }
    std::string number_; // a number strtod must read (see number())
};

bool reader::run() {
    // A UTF-8 byte order mark, as nlohmann skips it: EF BB BF, or an error at EF.
    if (!t_.empty() && static_cast<unsigned char>(t_[0]) == 0xEF) {
        if (!t_.starts_with("\xEF\xBB\xBF")) {
            std::size_t at = 1;
            if (t_.size() > 1 && static_cast<unsigned char>(t_[1]) == 0xBB)
                at = 2;
            return fail(at);
        }
        i_ = 3;
    }
    // The open containers, innermost last: true for an object.
    std::vector<bool> open;
    auto error = [&] {
        if (overflow_)
            return e_.parse_error(error_at_ + 1, json_error::number_overflow);
        return fail(error_at_);
    };

    skip_whitespace();
    for (;;) {
        // A value.
        if (at_end())
            return fail(i_);
        const char c = t_[i_];
        bool in_key = false;
        if (c == '{' || c == '[') {
            const bool object = c == '{';
            ++i_;
            if (!(object ? e_.start_object() : e_.start_array()))
                return false;
            skip_whitespace();
            if (peek() == (object ? '}' : ']')) {
                ++i_;
                if (!(object ? e_.end_object() : e_.end_array()))
                    return false;
            } else {
                open.push_back(object);
                if (!object)
                    continue; // its first value
                in_key = true;
            }
        } else {
            switch (scalar()) {
            case step::ok:
                break;
            case step::stop:
                return false;
            case step::error:
                return error();
            }
        }

        // After a value (or at a key, after an object's opening brace or a comma).
        for (;;) {
            if (in_key) {
                if (peek() != '"')
                    return fail(i_);
                std::string_view k;
                if (!read_string(k))
                    return fail(error_at_);
                const bool go = e_.key(k);
                release_decoded();
                if (!go)
                    return false;
                skip_whitespace();
                if (peek() != ':')
                    return fail(i_);
                ++i_;
                skip_whitespace();
                break; // its value
            }
            skip_whitespace();
            if (open.empty()) {
                if (!at_end())
                    return fail(i_);
                return true;
            }
            const char d = peek();
            if (d == ',') {
                ++i_;
                skip_whitespace();
                if (open.back()) {
                    in_key = true;
                    continue;
                }
                break; // the next value
            }
            if (d == (open.back() ? '}' : ']')) {
                ++i_;
                const bool object = open.back();
                open.pop_back();
                if (!(object ? e_.end_object() : e_.end_array()))
                    return false;
                continue;
            }
            return fail(i_);
        }
    }
}

reader::step reader::scalar() {
    const char c = t_[i_];
    if (c == '"') {
        std::string_view s;
        if (!read_string(s))
            return step::error;
        const bool go = e_.string(s);
        release_decoded();
        return go ? step::ok : step::stop;
    }
    if (c == '-' || is_digit(c))
        return number();
    if (c == 't')
        return literal("true");
    if (c == 'f')
        return literal("false");
    if (c == 'n')
        return literal("null");
    error_at_ = i_;
    return step::error;
}

reader::step reader::literal(std::string_view word) {
    for (std::size_t j = 0; j < word.size(); ++j)
        if (i_ + j >= t_.size() || t_[i_ + j] != word[j]) {
            error_at_ = i_ + j;
            return step::error;
        }
    i_ += word.size();
    bool go = true;
    if (word == "null")
        go = e_.null();
    else
        go = e_.boolean(word == "true");
    return go ? step::ok : step::stop;
}

// RFC 8259's number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
reader::step reader::number() {
    const std::size_t start = i_;
    const bool negative = peek() == '-';
    if (negative)
        ++i_;
    auto need_digit = [&] {
        if (is_digit(peek()))
            return true;
        error_at_ = i_;
        return false;
    };
    if (!need_digit())
        return step::error;
    if (peek() == '0')
        ++i_;
    else
        while (is_digit(peek()))
            ++i_;
    bool integer = true;
    if (peek() == '.') {
        integer = false;
        ++i_;
        if (!need_digit())
            return step::error;
        while (is_digit(peek()))
            ++i_;
    }
    if (peek() == 'e' || peek() == 'E') {
        integer = false;
        ++i_;
        if (peek() == '+' || peek() == '-')
            ++i_;
        if (!need_digit())
            return step::error;
        while (is_digit(peek()))
            ++i_;
    }
    const std::string_view text = t_.substr(start, i_ - start);
    const char* const first = text.data();
    const char* const last = first + text.size();
    if (integer) {
        // As nlohmann: an integer that fits its type, else a double.
        if (negative) {
            std::int64_t v = 0;
            if (std::from_chars(first, last, v).ec == std::errc{})
                return e_.number_integer(v) ? step::ok : step::stop;
        } else {
            std::uint64_t v = 0;
            if (std::from_chars(first, last, v).ec == std::errc{})
                return e_.number_unsigned(v) ? step::ok : step::stop;
        }
    }
    double v = 0;
    const auto r = std::from_chars(first, last, v);
    if (r.ec == std::errc::result_out_of_range) {
        // Beyond a double's range, or below its smallest subnormal. nlohmann takes
        // strtod's answer for either (0 or a subnormal for the second) and refuses what
        // is not finite: so does this, on a copy strtod can read (a rare path; the
        // copy is no longer than the number).
        number_.assign(text);
        v = std::strtod(number_.c_str(), nullptr);
        number_.clear();
        number_.shrink_to_fit();
    } else if (r.ec != std::errc{} || r.ptr != last) {
        error_at_ = start; // never: the text is a number by the grammar above
        return step::error;
    }
    if (!std::isfinite(v)) {
        error_at_ = i_ - 1;
        overflow_ = true;
        return step::error;
    }
    return e_.number_float(v, text) ? step::ok : step::stop;
}

bool reader::read_string(std::string_view& out) {
    const std::size_t start = ++i_; // past the opening quote
    bool decoding = false;          // an escape was seen: decoded_ holds the string so far
    for (;;) {
        if (at_end()) {
            error_at_ = i_;
            return false;
        }
        const auto c = static_cast<unsigned char>(t_[i_]);
        if (c == '"') {
            out = decoding ? std::string_view{decoded_} : t_.substr(start, i_ - start);
            ++i_;
            return true;
        }
        if (c < 0x20) {
            error_at_ = i_;
            return false;
        }
        if (c == '\\') {
            if (!decoding)
                start_decoding(start);
            decoding = true;
            if (!read_escape())
                return false;
            continue;
        }
        std::size_t n = 1;
        if (c >= 0x80) {
            const auto step = fence::decode_utf8(t_, i_);
            if (step.length < 0) {
                error_at_ = i_ + static_cast<std::size_t>(-step.length);
                return false;
            }
            n = static_cast<std::size_t>(step.length);
        }
        if (decoding)
            decoded_.append(t_.substr(i_, n));
        i_ += n;
    }
}

// At the first backslash of the string starting at `from`: decoded_ gets the text so far,
// and first room for the whole string decoded (an upper bound found by a scan to its
// closing quote: an escape \x is one byte, \uXXXX at most three; the whole rest of the
// text when there is no closing quote), so that it never grows while it is written.
void reader::start_decoding(std::size_t from) {
    std::size_t end = i_, room = i_ - from;
    while (end < t_.size() && t_[end] != '"') {
        if (t_[end] != '\\') {
            ++end;
            ++room;
        } else if (end + 1 < t_.size() && t_[end + 1] == 'u') {
            end += 6;
            room += 3;
        } else {
            end += 2;
            room += 1;
        }
    }
    decoded_.clear();
    decoded_.reserve(room);
    decoded_.append(t_.substr(from, i_ - from));
}

bool reader::read_hex4(std::size_t at, unsigned& v) {
    v = 0;
    for (std::size_t j = 0; j < 4; ++j) {
        const int h = at + j < t_.size() ? fence::hex_value(t_[at + j]) : -1;
        if (h < 0) {
            error_at_ = at + j;
            return false;
        }
        v = v << 4 | static_cast<unsigned>(h);
    }
    return true;
}

// The escape at t_[i_] (a backslash), decoded onto decoded_.
bool reader::read_escape() {
    if (i_ + 1 >= t_.size()) {
        error_at_ = i_ + 1;
        return false;
    }
    const char e = t_[i_ + 1];
    char plain = 0;
    switch (e) {
    case '"':
    case '\\':
    case '/':
        plain = e;
        break;
    case 'b':
        plain = '\b';
        break;
    case 'f':
        plain = '\f';
        break;
    case 'n':
        plain = '\n';
        break;
    case 'r':
        plain = '\r';
        break;
    case 't':
        plain = '\t';
        break;
    case 'u':
        break;
    default:
        error_at_ = i_ + 1;
        return false;
    }
    if (e != 'u') {
        decoded_.push_back(plain);
        i_ += 2;
        return true;
    }
    unsigned cp = 0;
    if (!read_hex4(i_ + 2, cp))
        return false;
    i_ += 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        error_at_ = i_ - 1; // a low surrogate alone
        return false;
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        // A high surrogate: a low one must follow, as \uDC00-\uDFFF.
        if (i_ + 1 >= t_.size() || t_[i_] != '\\' || t_[i_ + 1] != 'u') {
            error_at_ = i_ < t_.size() && t_[i_] == '\\' ? i_ + 1 : i_;
            return false;
        }
        unsigned low = 0;
        if (!read_hex4(i_ + 2, low))
            return false;
        i_ += 6;
        if (low < 0xDC00 || low > 0xDFFF) {
            error_at_ = i_ - 1;
            return false;
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    fence::append_utf8(decoded_, static_cast<char32_t>(cp));
    return true;
}

} // namespace

bool read_json(std::string_view text, json_events& events) {
    return reader{text, events}.run();
}

} // namespace fk::proxy::detail
