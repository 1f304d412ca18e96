#include "proxy/detail/operation_params.hpp"

#include "fence/json_string.hpp"
#include "proxy/detail/excerpt.hpp"
#include "proxy/detail/json_reader.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace fk::proxy::detail {

namespace {

constexpr std::string_view shape = "the body must be JSON {\"params\": [...]}";

std::string count_of(std::size_t n) {
    return std::to_string(n) + (n == 1 ? " parameter" : " parameters");
}

// JSON events → parameters. Depth 1 is the body's object, 2 the params array; each
// element of the array is handed to a param_value from its first event to its last.
// Returning false stops the parser at once; `error` says why.
class params_handler final : public json_events {
public:
    params_handler(std::optional<std::size_t> takes, std::string_view name)
        : limit_(takes.value_or(max_statement_params)), known_(takes.has_value()), name_(name) {}

    store::text_params values;
    std::string error;

    bool finish() {
        if (!params_seen_)
            return fail(std::string{shape});
        if (known_ && values.size() != limit_)
            return fail("operation '" + std::string{name_} + "' takes " + count_of(limit_) +
                        ", got " + std::to_string(values.size()));
        return true;
    }

    bool null() override {
        return value([&] { return param_.null(); });
    }
    bool boolean(bool v) override {
        return value([&] { return param_.boolean(v); });
    }
    bool number_integer(std::int64_t v) override {
        return value([&] { return param_.number_integer(v); });
    }
    bool number_unsigned(std::uint64_t v) override {
        return value([&] { return param_.number_unsigned(v); });
    }
    bool number_float(double v, std::string_view text) override {
        return value([&] { return param_.number_float(v, text); });
    }
    bool string(std::string_view v) override {
        return value([&] { return param_.string(v); });
    }
    bool start_object() override {
        if (depth_ == 0) {
            depth_ = 1;
            return true;
        }
        if (depth_ == 1)
            return fail(std::string{shape});
        return value([&] { return param_.start_object(); });
    }
    bool start_array() override {
        if (depth_ == 0)
            return fail(std::string{shape});
        if (depth_ == 1) {
            // The value of "params".
            if (in_params_)
                return fail(std::string{shape});
            in_params_ = true;
            depth_ = 2;
            return true;
        }
        return value([&] { return param_.start_array(); });
    }
    bool end_object() override {
        if (depth_ == 1) {
            depth_ = 0;
            return true;
        }
        return value([&] { return param_.end_object(); });
    }
    bool end_array() override {
        if (depth_ == 2 && !in_value_) {
            depth_ = 1;
            return true;
        }
        return value([&] { return param_.end_array(); });
    }

    bool key(std::string_view k) override {
        if (depth_ == 1) {
            if (k != "params")
                return fail(std::string{shape});
            if (params_seen_)
                return fail("duplicate key 'params'");
            params_seen_ = true;
            return true;
        }
        return value([&] { return param_.key(k); });
    }

    bool parse_error(std::size_t position, json_error e) override {
        if (!error.empty())
            return false;
        if (e == json_error::number_overflow)
            return fail("a number in the body is beyond ±1.8e308 (byte " +
                        std::to_string(position) +
                        "); send it as a JSON string, which the database casts");
        return fail(std::string{shape} + ": the body is not valid JSON (byte " +
                    std::to_string(position) + ")");
    }

private:
    bool fail(std::string message) {
        if (error.empty())
            error = std::move(message);
        return false;
    }

    // An event inside the params array: the start of a parameter (stopping at the first
    // one beyond the limit, before reading any of it) or part of one.
    template <class Event> bool value(Event event) {
        if (depth_ < 2)
            return fail(std::string{shape});
        if (!in_value_) {
            if (values.size() >= limit_) {
                if (known_)
                    return fail("operation '" + std::string{name_} + "' takes " + count_of(limit_) +
                                ", got more than " + std::to_string(limit_));
                return fail("more than " + count_of(limit_) +
                            " (PostgreSQL's limit for a statement)");
            }
            param_.begin(values.size() + 1, values);
            in_value_ = true;
        }
        if (!event())
            return fail(std::move(param_.error));
        if (param_.done())
            in_value_ = false;
        return true;
    }

    std::size_t limit_;
    bool known_;
    std::string_view name_;
    std::size_t depth_ = 0;    // 0 outside, 1 the body's object, 2 the params array
    bool params_seen_ = false; // the key "params" was read
    bool in_params_ = false;   // its array was opened
    bool in_value_ = false;    // a parameter has started and not ended
    param_value param_{2};
};

} // namespace

void param_value::begin(std::size_t number, store::text_params& out) {
    number_ = number;
    done_ = false;
    out_ = &out;
    start_ = out.raw().size();
    frames_.clear();
    key_at_.clear();
    error.clear();
}

bool param_value::fail(std::string message) {
    if (error.empty())
        error = std::move(message);
    return false;
}

bool param_value::string(std::string_view v) {
    if (frames_.empty() && v.find('\0') != std::string::npos)
        return fail("a string parameter contains a NUL character");
    return scalar(v, true);
}

bool param_value::key(std::string_view k) {
    if (frames_.empty() || !frames_.back().is_object)
        return fail("a key outside an object"); // never sent by the SAX parser
    auto& f = frames_.back();
    if (!f.first)
        text() += ',';
    f.first = false;
    // Offsets are 4 bytes: a parameter of 4 GiB is far beyond any body limit (1 GiB).
    const std::size_t at = text().size() - start_;
    if (at > std::numeric_limits<std::uint32_t>::max())
        return fail("parameter " + std::to_string(number_) + " is larger than 4 GiB");
    key_at_.push_back(static_cast<std::uint32_t>(at));
    fence::append_json_string(text(), k);
    text() += ':';
    return true;
}

// The key written at `at` (from start_), as JSON (quotes included): up to its closing
// quote, the first one not escaped by a backslash.
std::string_view param_value::key_text(std::uint32_t at) const noexcept {
    const std::string_view t = out_->raw();
    const std::size_t begin = start_ + at;
    std::size_t end = begin + 1;
    while (t[end] != '"')
        end += t[end] == '\\' ? 2 : 1;
    return t.substr(begin, end + 1 - begin);
}

// The keys of the object closing now, from key_at_[from] on, sorted and compared
// neighbour to neighbour. Their JSON text stands for the keys themselves: the parser
// hands over only valid UTF-8, which append_json_string writes one way only.
bool param_value::unique_keys(std::size_t from) {
    const auto first = key_at_.begin() + static_cast<std::ptrdiff_t>(from);
    std::sort(first, key_at_.end(),
              [this](std::uint32_t a, std::uint32_t b) { return key_text(a) < key_text(b); });
    const auto dup =
        std::adjacent_find(first, key_at_.end(), [this](std::uint32_t a, std::uint32_t b) {
            return key_text(a) == key_text(b);
        });
    if (dup != key_at_.end()) {
        const auto k = key_text(*dup);
        return fail("duplicate key '" + excerpt(k.substr(1, k.size() - 2)) + "' in parameter " +
                    std::to_string(number_));
    }
    key_at_.erase(first, key_at_.end()); // at the end of a deque: its blocks are freed
    return true;
}

// Inside an array or object parameter: the separator before a value.
void param_value::separate() {
    auto& f = frames_.back();
    if (!f.is_object) {
        if (!f.first)
            text() += ',';
        f.first = false;
    }
}

bool param_value::scalar(std::optional<std::string_view> v, bool is_string) {
    if (frames_.empty()) {
        out_->push_back(v);
        done_ = true;
        return true;
    }
    separate();
    if (!v)
        text() += "null";
    else if (is_string)
        fence::append_json_string(text(), *v);
    else
        text() += *v;
    return true;
}

bool param_value::open(bool is_object) {
    if (base_depth_ + frames_.size() + 1 > max_params_depth)
        return fail("JSON nested deeper than " + std::to_string(max_params_depth) + " levels");
    if (!frames_.empty())
        separate();
    text() += is_object ? '{' : '[';
    frames_.push_back(frame{is_object, true, key_at_.size()});
    return true;
}

bool param_value::close(char c) {
    if (frames_.back().is_object && !unique_keys(frames_.back().keys))
        return false;
    text() += c;
    frames_.pop_back();
    if (frames_.empty()) {
        out_->end_raw(start_);
        done_ = true;
    }
    return true;
}

operation_params parse_operation_params(std::string_view body, std::optional<std::size_t> takes,
                                        std::string_view name) {
    params_handler h{takes, name};
    // Each parameter's text and its NUL take no more than its JSON and the comma or bracket
    // after it: the body's size is room for all of them, and none is allocated twice (an
    // array or object is written here as it is read: param_value).
    h.values.reserve(body.size());
    operation_params out;
    if (read_json(body, h) && h.finish())
        out.values = std::move(h.values); // still the body's size: see `values`
    else
        out.error = h.error.empty() ? std::string{shape} : std::move(h.error);
    return out;
}

} // namespace fk::proxy::detail
