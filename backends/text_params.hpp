#pragma once
// Statement parameters as text ($1..$n; nullopt is SQL NULL), packed into one buffer: each
// value followed by a NUL (libpq's text format takes C strings, which point straight into
// it), SQL NULL as the single byte 0xFF (never part of a value: values are UTF-8, and a
// NUL is refused by every parser that makes them). A parameter costs its text + 1 byte
// (NULL: 2), where a vector<optional<string>> cost 40 at least: a body of 8 MiB of "1,"
// parameters once became 170 MB (issue 45). The HTTP side parses bodies into this
// (proxy/detail/operation_params.hpp, txn_body.hpp) and the Postgres store sends it as
// is. A plain value type; no thread rules.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace fk::store {

class text_params {
public:
    text_params() = default;
    text_params(std::initializer_list<std::optional<std::string_view>> values);

    // Appends $size()+1. A value holding a NUL or a 0xFF byte is a caller's bug
    // (std::invalid_argument).
    void push_back(std::optional<std::string_view> value);
    void push_back(const std::optional<std::string>& value) {
        push_back(value ? std::optional<std::string_view>{*value} : std::nullopt);
    }
    std::size_t size() const noexcept { return count_; }
    bool empty() const noexcept { return count_ == 0; }
    // Drops every value and gives the memory back.
    void release() noexcept;
    // Drops every value, keeping the buffer for the next ones.
    void clear() noexcept {
        text_.clear();
        count_ = 0;
    }
    // A value written in place, by a parser that produces its text as it reads it (no
    // copy in between): append the text to raw(), then end_raw(start), `start` being
    // raw().size() before the first append. Checked as push_back checks. Nothing else may
    // touch the values in between; raw() itself must not be changed otherwise.
    std::string& raw() noexcept { return text_; }
    const std::string& raw() const noexcept { return text_; }
    void end_raw(std::size_t start);
    // Room for `bytes` of values (each value's text and its NUL, 2 for a NULL).
    void reserve(std::size_t bytes) { text_.reserve(bytes); }
    // Gives back the buffer's unused capacity (after the last push_back), when it is more
    // than an eighth of what the values take: below that, the copy shrinking makes (all the
    // values, for a moment) costs more than it gives back.
    void shrink_to_fit();
    // The bytes allocated for the values.
    std::size_t held_bytes() const noexcept { return text_.capacity(); }

    // The values in order: a C string each (nullptr for NULL), with its length.
    class const_iterator {
    public:
        using iterator_category = std::forward_iterator_tag;
        using value_type = std::optional<std::string_view>;
        using difference_type = std::ptrdiff_t;
        using pointer = void;
        using reference = value_type;

        const_iterator() = default;
        value_type operator*() const noexcept;
        // nullptr for NULL, else the value, NUL-terminated.
        const char* c_str() const noexcept { return is_null() ? nullptr : at_; }
        std::size_t length() const noexcept { return length_; }
        const_iterator& operator++() noexcept;
        const_iterator operator++(int) noexcept {
            auto old = *this;
            ++*this;
            return old;
        }
        bool operator==(const const_iterator& o) const noexcept { return at_ == o.at_; }

    private:
        friend class text_params;
        const_iterator(const char* at, const char* end) noexcept;
        bool is_null() const noexcept;
        const char* at_ = nullptr;
        const char* end_ = nullptr;
        std::size_t length_ = 0;
    };
    const_iterator begin() const noexcept;
    const_iterator end() const noexcept;

    // $i+1, by a walk from the start: O(i). For tests and messages, not for loops.
    std::optional<std::string_view> at(std::size_t i) const;

    bool operator==(const text_params& o) const noexcept {
        return count_ == o.count_ && text_ == o.text_;
    }

private:
    std::string text_;
    std::size_t count_ = 0;
};

} // namespace fk::store
