#include "proxy/detail/operation_params.hpp"

#include "config/logging.hpp"

#include <nlohmann/json.hpp>

#include <set>
#include <utility>

namespace fk::proxy::detail {

namespace {

using json = nlohmann::json;

constexpr std::string_view shape = "the body must be JSON {\"params\": [...]}";

std::string count_of(std::size_t n) {
    return std::to_string(n) + (n == 1 ? " parameter" : " parameters");
}

// SAX events → parameters. Depth 1 is the body's object, 2 the params array; a parameter
// that is an array or object (depth 3 and deeper) is written out as compact JSON while
// it is parsed. Returning false stops the parser at once; `error` says why.
class params_handler {
public:
    params_handler(std::optional<std::size_t> takes, std::string_view name)
        : limit_(takes.value_or(max_statement_params)), known_(takes.has_value()), name_(name) {}

    std::vector<std::optional<std::string>> values;
    std::string error;

    bool finish() {
        if (!params_seen_)
            return fail(std::string{shape});
        if (known_ && values.size() != limit_)
            return fail("operation '" + std::string{name_} + "' takes " + count_of(limit_) +
                        ", got " + std::to_string(values.size()));
        return true;
    }

    bool null() { return scalar(std::nullopt); }
    bool boolean(bool v) { return scalar(std::string{v ? "true" : "false"}); }
    // nlohmann reads "-0" as the only signed zero: every other integer has exactly one
    // JSON spelling, which its value gives back.
    bool number_integer(json::number_integer_t v) {
        return scalar(v == 0 ? std::string{"-0"} : std::to_string(v));
    }
    bool number_unsigned(json::number_unsigned_t v) { return scalar(std::to_string(v)); }
    // `text` is the number as written: a value beyond int64/uint64 or a double's
    // precision arrives intact.
    bool number_float(json::number_float_t, const std::string& text) { return scalar(text); }
    bool string(std::string& v) {
        if (depth_ == 2 && v.find('\0') != std::string::npos)
            return fail("a string parameter contains a NUL character");
        return scalar(std::move(v), true);
    }
    bool binary(json::binary_t&) { return fail(std::string{shape}); }

    bool start_object(std::size_t) { return open(true); }
    bool start_array(std::size_t) { return open(false); }
    bool end_object() { return close('}'); }
    bool end_array() { return close(']'); }

    bool key(std::string& k) {
        if (depth_ == 1) {
            if (k != "params")
                return fail(std::string{shape});
            if (params_seen_)
                return fail("duplicate key 'params'");
            params_seen_ = true;
            return true;
        }
        auto& f = frames_.back();
        if (!f.keys.insert(k).second)
            return fail("duplicate key '" + excerpt(k) + "' in parameter " +
                        std::to_string(values.size() + 1));
        if (!f.first)
            text_ += ',';
        f.first = false;
        logging::append_json_string(text_, k);
        text_ += ':';
        return true;
    }

    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception& e) {
        if (!error.empty())
            return false;
        // 406: a number the parser cannot hold as a double (beyond ±1.8e308).
        if (e.id == 406)
            return fail("a number in the body is beyond ±1.8e308 (byte " +
                        std::to_string(position) +
                        "); send it as a JSON string, which the database casts");
        return fail(std::string{shape} + ": the body is not valid JSON (byte " +
                    std::to_string(position) + ")");
    }

private:
    struct frame {
        bool is_object = false;
        bool first = true;
        std::set<std::string> keys; // objects only
    };

    bool fail(std::string message) {
        if (error.empty())
            error = std::move(message);
        return false;
    }

    static std::string excerpt(std::string_view s) {
        constexpr std::size_t max = 64;
        return s.size() <= max ? std::string{s} : std::string{s.substr(0, max)} + "...";
    }

    // A new parameter is about to start: stop at the first one beyond the limit, before
    // reading any of it.
    bool next_param() {
        if (values.size() < limit_)
            return true;
        if (known_)
            return fail("operation '" + std::string{name_} + "' takes " + count_of(limit_) +
                        ", got more than " + std::to_string(limit_));
        return fail("more than " + count_of(limit_) + " (PostgreSQL's limit for a statement)");
    }

    // Inside a parameter that is an array or object: the separator before a value.
    void separate() {
        auto& f = frames_.back();
        if (!f.is_object) {
            if (!f.first)
                text_ += ',';
            f.first = false;
        }
    }

    bool scalar(std::optional<std::string> v, bool is_string = false) {
        if (depth_ < 2)
            return fail(std::string{shape});
        if (depth_ == 2) {
            if (!next_param())
                return false;
            values.push_back(std::move(v));
            return true;
        }
        separate();
        if (!v)
            text_ += "null";
        else if (is_string)
            logging::append_json_string(text_, *v);
        else
            text_ += *v;
        return true;
    }

    bool open(bool is_object) {
        if (depth_ + 1 > max_params_depth)
            return fail("JSON nested deeper than " + std::to_string(max_params_depth) + " levels");
        if (depth_ == 0) {
            if (!is_object)
                return fail(std::string{shape});
        } else if (depth_ == 1) {
            // The value of "params".
            if (is_object || in_params_)
                return fail(std::string{shape});
            in_params_ = true;
        } else {
            if (depth_ == 2) {
                if (!next_param())
                    return false;
                text_.clear();
            } else {
                separate();
            }
            text_ += is_object ? '{' : '[';
            frames_.push_back(frame{is_object, true, {}});
        }
        ++depth_;
        return true;
    }

    bool close(char c) {
        --depth_;
        if (depth_ < 2)
            return true;
        text_ += c;
        frames_.pop_back();
        if (depth_ == 2) {
            values.emplace_back(std::move(text_));
            text_.clear();
        }
        return true;
    }

    std::size_t limit_;
    bool known_;
    std::string_view name_;
    std::size_t depth_ = 0;
    bool params_seen_ = false; // the key "params" was read
    bool in_params_ = false;   // its array was opened
    std::string text_;         // the array or object parameter being read
    std::vector<frame> frames_;
};

} // namespace

operation_params parse_operation_params(std::string_view body, std::optional<std::size_t> takes,
                                        std::string_view name) {
    params_handler h{takes, name};
    operation_params out;
    if (json::sax_parse(body.begin(), body.end(), &h) && h.finish())
        out.values = std::move(h.values);
    else
        out.error = h.error.empty() ? std::string{shape} : std::move(h.error);
    return out;
}

} // namespace fk::proxy::detail
