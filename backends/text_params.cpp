#include "backends/text_params.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace fk::store {

text_params::text_params(std::initializer_list<std::optional<std::string_view>> values) {
    for (const auto& v : values)
        push_back(v);
}

namespace {

constexpr char null_mark = '\xff';

void check_value(std::string_view value) {
    if (value.find('\0') != std::string_view::npos ||
        value.find(null_mark) != std::string_view::npos)
        throw std::invalid_argument("text_params: a value holds a NUL or 0xFF byte");
}

// Room for `more` bytes, doubling as the string would. Growing once for a value and its
// NUL: appending the two one after the other grew the buffer twice for a value that
// filled it, to twice the value's size (a 600 KB parameter held 1.8 MB for a moment;
// issue 45).
void make_room(std::string& text, std::size_t more) {
    const std::size_t need = text.size() + more;
    if (need > text.capacity())
        text.reserve(std::max(need, 2 * text.capacity()));
}

} // namespace

void text_params::push_back(std::optional<std::string_view> value) {
    if (value)
        check_value(*value);
    make_room(text_, (value ? value->size() : 1) + 1);
    if (!value)
        text_ += null_mark;
    else
        text_ += *value;
    text_ += '\0';
    ++count_;
}

void text_params::end_raw(std::size_t start) {
    check_value(std::string_view{text_}.substr(start));
    make_room(text_, 1);
    text_ += '\0';
    ++count_;
}

void text_params::shrink_to_fit() {
    if (text_.capacity() - text_.size() > text_.size() / 8)
        text_.shrink_to_fit();
}

void text_params::release() noexcept {
    std::string{}.swap(text_);
    count_ = 0;
}

text_params::const_iterator::const_iterator(const char* at, const char* end) noexcept
    : at_(at), end_(end) {
    if (at_ != end_)
        length_ = std::strlen(at_);
}

bool text_params::const_iterator::is_null() const noexcept {
    return length_ == 1 && *at_ == null_mark;
}

text_params::const_iterator::value_type text_params::const_iterator::operator*() const noexcept {
    if (is_null())
        return std::nullopt;
    return std::string_view{at_, length_};
}

text_params::const_iterator& text_params::const_iterator::operator++() noexcept {
    at_ += length_ + 1;
    length_ = at_ != end_ ? std::strlen(at_) : 0;
    return *this;
}

text_params::const_iterator text_params::begin() const noexcept {
    return const_iterator{text_.data(), text_.data() + text_.size()};
}

text_params::const_iterator text_params::end() const noexcept {
    const char* e = text_.data() + text_.size();
    return const_iterator{e, e};
}

std::optional<std::string_view> text_params::at(std::size_t i) const {
    if (i >= count_)
        throw std::out_of_range("text_params::at");
    auto it = begin();
    while (i-- > 0)
        ++it;
    return *it;
}

} // namespace fk::store
