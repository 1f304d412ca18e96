#include "proxy/detail/txn_body.hpp"

#include "fence/names.hpp"
#include "proxy/detail/excerpt.hpp"
#include "proxy/detail/json_reader.hpp"
#include "proxy/detail/operation_params.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <utility>

namespace fk::proxy::detail {

namespace {

using store::txn_op;

constexpr std::string_view shape = "the body must be JSON {\"ops\": [...]}";
constexpr std::uint64_t max_int64 =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// An op's fields, as bits of a mask.
enum class field : unsigned {
    op,
    key,
    lock,
    token,
    body,
    body_base64,
    content_type,
    if_match,
    if_none_match,
    version,
    absent,
    name,
    params,
    count
};

constexpr std::array<std::string_view, static_cast<std::size_t>(field::count)> field_names = {
    "op",       "key",           "lock",    "token",  "body", "body_base64", "content_type",
    "if_match", "if_none_match", "version", "absent", "name", "params"};

constexpr unsigned bit(field f) noexcept {
    return 1u << static_cast<unsigned>(f);
}

// The fields each kind takes (docs/api.md#post-v1transactions).
constexpr unsigned fields_of(txn_op::kind k) noexcept {
    switch (k) {
    case txn_op::kind::put:
        return bit(field::op) | bit(field::key) | bit(field::lock) | bit(field::token) |
               bit(field::body) | bit(field::body_base64) | bit(field::content_type) |
               bit(field::if_match) | bit(field::if_none_match);
    case txn_op::kind::remove:
        return bit(field::op) | bit(field::key) | bit(field::lock) | bit(field::token) |
               bit(field::if_match);
    case txn_op::kind::fence:
    case txn_op::kind::check:
        return bit(field::op) | bit(field::lock) | bit(field::token);
    case txn_op::kind::check_version:
        return bit(field::op) | bit(field::key) | bit(field::version) | bit(field::absent);
    case txn_op::kind::operation:
        return bit(field::op) | bit(field::name) | bit(field::params) | bit(field::lock) |
               bit(field::token);
    }
    return 0;
}

// What a field's value must be, for the messages.
std::string_view expected(field f) noexcept {
    switch (f) {
    case field::op:
        return "one of \"put\", \"delete\", \"fence\", \"check\", \"check_version\", "
               "\"operation\"";
    case field::key:
        return "a key: 1 to 1024 bytes of UTF-8 without control characters or empty, '.' or "
               "'..' segments";
    case field::lock:
        return "a lock name: 1 to 1024 bytes of UTF-8 without control characters";
    case field::token:
        return "a fencing token: an integer from 0 to 9223372036854775807, or a string of 1 to "
               "19 digits without sign or leading zeros";
    case field::body:
        return "a string";
    case field::body_base64:
        return "a base64 string (RFC 4648, standard alphabet, padded)";
    case field::content_type:
        return "a string of at most 1024 printable ASCII characters";
    case field::if_match:
        return "a version (an integer from 1) or \"*\"";
    case field::if_none_match:
        return "\"*\"";
    case field::version:
        return "a version: an integer from 1";
    case field::absent:
        return "true";
    case field::name:
        return "an operation name: 1 to 1024 bytes of UTF-8 without control characters";
    case field::params:
        return "an array";
    case field::count:
        break;
    }
    return "?";
}

std::optional<txn_op::kind> kind_of(std::string_view s) noexcept {
    using k = txn_op::kind;
    for (auto kind : {k::put, k::remove, k::fence, k::check, k::check_version, k::operation})
        if (store::to_string(kind) == s)
            return kind;
    return std::nullopt;
}

bool valid_content_type(std::string_view s) noexcept {
    if (s.size() > max_txn_content_type_bytes)
        return false;
    for (unsigned char c : s)
        if (c < 0x20 || c > 0x7e)
            return false;
    return true;
}

std::string count_of(std::size_t n) {
    return std::to_string(n) + (n == 1 ? " parameter" : " parameters");
}

// One op while it is parsed: the fields seen, and their values.
struct op_fields {
    unsigned seen = 0;
    std::optional<txn_op::kind> kind;
    std::optional<fence::token_t> token;
    std::optional<std::string> body; // body, or body_base64 decoded
    bool absent = false;
    txn_op op; // key, lock, content_type, pre, version, name, params as given (and kept)
    std::size_t count = 0;            // the parameters read
    std::optional<std::size_t> takes; // the operation's count, when the store knows it
    bool dropped = false;             // none of its parameters is kept
};

// JSON events → ops. Depth 1 is the body's object, 2 the ops array, 3 an op, 4 an
// operation's params array, whose elements are handed to a param_value. Returning false
// stops the parser at once; error says why.
class txn_handler final : public json_events {
public:
    txn_handler(const txn_body_rules& rules, std::size_t body_bytes)
        : rules_(rules), body_bytes_(body_bytes) {}

    txn_body out;

    bool finish() {
        if (!ops_seen_)
            return fail(std::string{shape});
        return true;
    }

    bool null() override {
        return scalar([&] { return param_.null(); }, "null");
    }
    bool boolean(bool v) override {
        if (depth_ == 3 && field_ == field::absent && v) {
            cur_.absent = true;
            return true;
        }
        return scalar([&] { return param_.boolean(v); }, v ? "true" : "false");
    }
    bool number_integer(std::int64_t v) override {
        return scalar([&] { return param_.number_integer(v); }, "a negative number");
    }
    bool number_unsigned(std::uint64_t v) override {
        if (depth_ == 3)
            return op_number(v);
        return scalar([&] { return param_.number_unsigned(v); }, "a number");
    }
    bool number_float(double v, std::string_view text) override {
        return scalar([&] { return param_.number_float(v, text); }, "a fractional number");
    }
    bool string(std::string_view v) override {
        if (depth_ == 3)
            return op_string(v);
        return scalar([&] { return param_.string(v); }, "a string");
    }
    bool start_object() override {
        switch (depth_) {
        case 0:
            depth_ = 1;
            return true;
        case 1:
            return fail(std::string{shape});
        case 2:
            // A new op.
            if (out.ops.size() >= rules_.max_ops)
                return fail_op(out.ops.size(), "a transaction holds at most " +
                                                   std::to_string(rules_.max_ops) +
                                                   " ops (limits.max_txn_ops)");
            cur_ = op_fields{};
            depth_ = 3;
            return true;
        case 3:
            return wrong_type("an object");
        default:
            return param_event([&] { return param_.start_object(); });
        }
    }
    bool start_array() override {
        switch (depth_) {
        case 0:
            return fail(std::string{shape});
        case 1:
            depth_ = 2; // the value of "ops"
            return true;
        case 2:
            return fail_op(out.ops.size(),
                           "op " + std::to_string(out.ops.size()) + " is not a JSON object");
        case 3:
            if (field_ != field::params)
                return wrong_type("an array");
            cur_.op.params.release();
            cur_.count = 0;
            // Room for whatever parameters the body can still hold (each no longer than its
            // JSON and the comma or bracket after it), given back when the array ends: the
            // buffer never doubles while a parameter is written into it (issue 45: up to 3
            // times what it held, for a moment). Untouched, the room costs no resident memory.
            if (keeps_params())
                cur_.op.params.reserve(body_bytes_);
            depth_ = 4;
            return true;
        default:
            return param_event([&] { return param_.start_array(); });
        }
    }
    bool end_object() override {
        switch (depth_) {
        case 1:
            depth_ = 0;
            return true;
        case 3:
            depth_ = 2;
            return finish_op();
        default:
            return param_event([&] { return param_.end_object(); });
        }
    }
    bool end_array() override {
        if (depth_ == 2) {
            depth_ = 1;
            return true;
        }
        if (depth_ == 4 && !in_param_) {
            cur_.op.params.shrink_to_fit();
            unkept_.release();
            depth_ = 3;
            return true;
        }
        return param_event([&] { return param_.end_array(); });
    }

    bool key(std::string_view k) override {
        if (depth_ == 1) {
            if (k != "ops")
                return fail(std::string{shape});
            if (ops_seen_)
                return fail("duplicate key 'ops'");
            ops_seen_ = true;
            return true;
        }
        if (depth_ == 3) {
            std::size_t i = 0;
            while (i < field_names.size() && field_names[i] != k)
                ++i;
            if (i == field_names.size())
                return fail_here("unknown field '" + excerpt(k) + "'");
            field_ = static_cast<field>(i);
            if (cur_.seen & bit(field_))
                return fail_here("duplicate key '" + std::string{k} + "'");
            cur_.seen |= bit(field_);
            return true;
        }
        return param_event([&] { return param_.key(k); });
    }

    bool parse_error(std::size_t position, json_error e) override {
        if (!out.message.empty())
            return false;
        if (depth_ >= 3)
            out.op_index = out.ops.size();
        if (e == json_error::number_overflow)
            return fail("a number in the body is beyond ±1.8e308 (byte " +
                        std::to_string(position) + "); in params, send it as a JSON string");
        return fail(std::string{shape} + ": the body is not valid JSON (byte " +
                    std::to_string(position) + ")");
    }

private:
    bool fail(std::string message, errc e = errc::invalid_request) {
        if (out.message.empty()) {
            out.error = e;
            out.message = std::move(message);
        }
        return false;
    }
    bool fail_op(std::size_t index, std::string message, errc e = errc::invalid_request) {
        if (out.message.empty())
            out.op_index = index;
        return fail(std::move(message), e);
    }
    // A refusal about the op being read.
    bool fail_here(std::string message, errc e = errc::invalid_request) {
        return fail_op(out.ops.size(), "op " + std::to_string(out.ops.size()) + ": " + message, e);
    }
    bool wrong_type(std::string_view got) {
        return fail_here("'" + std::string{field_names[static_cast<unsigned>(field_)]} +
                         "' must be " + std::string{expected(field_)} + ", got " +
                         std::string{got});
    }

    // A scalar: at depth 3 the value of field_ (every scalar not handled by the callers is
    // of the wrong type), at depth 4 and deeper part of a parameter.
    template <class Event> bool scalar(Event event, std::string_view what) {
        if (depth_ == 3)
            return wrong_type(what);
        if (depth_ < 3)
            return depth_ == 2 ? fail_op(out.ops.size(), "op " + std::to_string(out.ops.size()) +
                                                             " is not a JSON object")
                               : fail(std::string{shape});
        return param_event(event);
    }

    template <class Event> bool param_event(Event event) {
        if (depth_ < 4)
            return fail(std::string{shape}); // never: the cases above handle depth < 4
        if (!in_param_) {
            if (cur_.count >= max_statement_params)
                return fail_here("more than " + count_of(max_statement_params) +
                                 " (PostgreSQL's limit for a statement)");
            if (cur_.takes && cur_.count >= *cur_.takes)
                drop_params(); // refused at the op's end, for its count
            // A parameter that is not kept is still read whole (a refusal inside it
            // answers first), into a buffer of its own, emptied after each, with room as
            // the kept ones have.
            if (!keeps_params())
                unkept_.reserve(body_bytes_);
            param_.begin(cur_.count + 1, keeps_params() ? cur_.op.params : unkept_);
            in_param_ = true;
        }
        if (!event())
            return fail_here(std::move(param_.error));
        if (param_.done()) {
            unkept_.clear();
            ++cur_.count;
            in_param_ = false;
        }
        return true;
    }

    // The op's parameters are kept while it can still run: not once its count is wrong,
    // nor once any op names an operation the store does not have.
    bool keeps_params() const noexcept { return !cur_.dropped && !out.unknown_operation; }
    void drop_params() noexcept {
        cur_.dropped = true;
        cur_.op.params.release();
    }

    // The op's name is known: refuses to keep what cannot run.
    void named(const std::string& name) {
        if (!rules_.operations)
            return;
        if (rules_.known && !rules_.known(name)) {
            if (!out.unknown_operation) {
                out.unknown_operation = out.ops.size();
                for (auto& op : out.ops)
                    op.params.release();
            }
            drop_params();
            return;
        }
        if (rules_.param_count)
            cur_.takes = rules_.param_count(name);
        if (cur_.takes && cur_.count > *cur_.takes)
            drop_params();
    }

    bool op_number(std::uint64_t v) {
        auto& op = cur_.op;
        switch (field_) {
        case field::token:
            if (v > max_int64)
                return wrong_type("a number above 9223372036854775807");
            cur_.token = static_cast<fence::token_t>(v);
            return true;
        case field::if_match:
        case field::version:
            if (v < 1 || v > max_int64)
                return wrong_type(v < 1 ? "0" : "a number above 9223372036854775807");
            if (field_ == field::if_match)
                op.pre.if_match = static_cast<std::int64_t>(v);
            else
                op.version = static_cast<std::int64_t>(v);
            return true;
        default:
            return wrong_type("a number");
        }
    }

    bool op_string(std::string_view v) {
        auto& op = cur_.op;
        switch (field_) {
        case field::op:
            cur_.kind = kind_of(v);
            if (!cur_.kind)
                return wrong_type("'" + excerpt(v) + "'");
            return true;
        case field::key:
            if (fence::validate_key(v) != errc::ok)
                return wrong_type("'" + excerpt(v) + "'");
            op.key = v;
            return true;
        case field::lock:
            if (fence::validate_lock_name(v) != errc::ok)
                return wrong_type("'" + excerpt(v) + "'");
            op.lock = v;
            return true;
        case field::name:
            if (fence::validate_lock_name(v) != errc::ok)
                return wrong_type("'" + excerpt(v) + "'");
            op.name = v;
            named(op.name);
            return true;
        case field::token: {
            auto t = fence::parse_token(v);
            if (t.error != errc::ok)
                return wrong_type("'" + excerpt(v) + "'");
            cur_.token = t.value;
            return true;
        }
        case field::body:
            if (v.size() > rules_.max_op_body_bytes)
                return body_too_large(v.size());
            cur_.body = std::string{v};
            return true;
        case field::body_base64: {
            // The decoded size, known before decoding: 3 bytes per 4 characters, less the
            // padding.
            std::size_t size = v.size() / 4 * 3;
            if (v.ends_with("=="))
                size -= 2;
            else if (v.ends_with('='))
                size -= 1;
            if (v.size() % 4 == 0 && size > rules_.max_op_body_bytes)
                return body_too_large(size);
            auto decoded = decode_base64(v);
            if (!decoded)
                return wrong_type("malformed base64");
            cur_.body = std::move(*decoded);
            return true;
        }
        case field::content_type:
            if (!valid_content_type(v))
                return wrong_type("'" + excerpt(v) + "'");
            op.content_type = v;
            return true;
        case field::if_match:
            if (v != "*")
                return wrong_type("'" + excerpt(v) + "'");
            op.pre.if_match_any = true;
            return true;
        case field::if_none_match:
            if (v != "*")
                return wrong_type("'" + excerpt(v) + "'");
            op.pre.if_none_match_any = true;
            return true;
        default:
            return wrong_type("a string");
        }
    }

    bool body_too_large(std::size_t size) {
        return fail_here("the put's body has " + std::to_string(size) + " bytes, more than " +
                             std::to_string(rules_.max_op_body_bytes) +
                             " (limits.max_txn_op_body_bytes)",
                         errc::body_too_large);
    }

    bool missing(std::string_view what) {
        return fail_here(std::string{store::to_string(*cur_.kind)} + " needs " + std::string{what});
    }

    // The op is complete: its kind's fields, the header defaults, the operation's checks.
    bool finish_op() {
        if (!cur_.kind)
            return fail_here("no 'op' field; give one of \"put\", \"delete\", \"fence\", "
                             "\"check\", \"check_version\", \"operation\"");
        const auto kind = *cur_.kind;
        const unsigned extra = cur_.seen & ~fields_of(kind);
        if (extra != 0) {
            unsigned i = 0;
            while (!(extra & (1u << i)))
                ++i;
            return fail_here("'" + std::string{field_names[i]} + "' is not a field of a " +
                             std::string{store::to_string(kind)} + " op");
        }
        auto& op = cur_.op;
        op.op = kind;
        auto given = [&](field f) { return (cur_.seen & bit(f)) != 0; };

        const bool takes_key = kind == txn_op::kind::put || kind == txn_op::kind::remove ||
                               kind == txn_op::kind::check_version;
        if (takes_key && !given(field::key))
            return missing("a 'key'");
        if (kind == txn_op::kind::operation && !given(field::name))
            return missing("a 'name'");
        if (kind == txn_op::kind::operation && !given(field::params))
            return missing("'params' (an array; [] for none)");
        if (kind == txn_op::kind::put && given(field::body) == given(field::body_base64))
            return missing("exactly one of 'body' and 'body_base64'");
        if (kind == txn_op::kind::check_version && given(field::version) == given(field::absent))
            return missing("exactly one of 'version' and 'absent'");

        if (kind != txn_op::kind::check_version) {
            if (!cur_.token && !rules_.token)
                return missing("a token: a 'token' field or a Fencing-Token header");
            op.token = cur_.token ? *cur_.token : *rules_.token;
            if (!given(field::lock)) {
                if (rules_.lock)
                    op.lock = *rules_.lock;
                else if (kind == txn_op::kind::put || kind == txn_op::kind::remove)
                    op.lock = op.key; // as single writes: the default lock is the key
                else
                    return missing("a lock: a 'lock' field or a Fencing-Lock header");
            }
        }
        if (cur_.body)
            op.body = std::move(*cur_.body);

        if (kind == txn_op::kind::operation) {
            if (!rules_.operations)
                return fail_here("operation ops need the postgres store");
            // The count as named() learnt it: the store's, asked once per op.
            if (cur_.takes && *cur_.takes != cur_.count)
                return fail_here("operation '" + op.name + "' takes " + count_of(*cur_.takes) +
                                 ", got " + std::to_string(cur_.count));
        }
        out.ops.push_back(std::move(op));
        return true;
    }

    const txn_body_rules& rules_;
    std::size_t body_bytes_;
    std::size_t depth_ = 0;
    bool ops_seen_ = false;
    bool in_param_ = false; // a parameter has started and not ended
    field field_ = field::op;
    op_fields cur_;
    param_value param_{4};
    store::text_params unkept_; // the parameter being read, when its op keeps none
};

constexpr int base64_value(unsigned char c) noexcept {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

} // namespace

std::optional<std::string> decode_base64(std::string_view text) {
    if (text.size() % 4 != 0)
        return std::nullopt;
    std::size_t pad = 0;
    if (text.ends_with("=="))
        pad = 2;
    else if (text.ends_with('='))
        pad = 1;
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (std::size_t i = 0; i < text.size(); i += 4) {
        const bool last = i + 4 == text.size();
        std::uint32_t group = 0;
        for (std::size_t j = 0; j < 4; ++j) {
            const unsigned char c = static_cast<unsigned char>(text[i + j]);
            int v = 0;
            if (last && j >= 4 - pad)
                v = 0; // padding
            else if ((v = base64_value(c)) < 0)
                return std::nullopt;
            group = group << 6 | static_cast<std::uint32_t>(v);
        }
        const std::size_t bytes = last ? 3 - pad : 3;
        // The bits below the last byte must be zero: one encoding per byte string.
        if (bytes < 3 && (group & ((1u << (8 * (3 - bytes))) - 1)) != 0)
            return std::nullopt;
        for (std::size_t b = 0; b < bytes; ++b)
            out.push_back(static_cast<char>((group >> (16 - 8 * b)) & 0xff));
    }
    return out;
}

txn_body parse_txn_body(std::string_view body, const txn_body_rules& rules) {
    txn_handler h{rules, body.size()};
    if (!read_json(body, h) || !h.finish()) {
        auto out = std::move(h.out);
        out.ops.clear();
        out.unknown_operation.reset();
        if (out.message.empty()) {
            out.error = errc::invalid_request;
            out.message = std::string{shape};
        }
        return out;
    }
    auto out = std::move(h.out);
    if (auto bad = store::validate_txn(out.ops, rules.max_ops)) {
        out.ops.clear();
        out.error = errc::invalid_request;
        out.op_index = bad->op_index;
        out.message = std::move(bad->message);
        out.unknown_operation.reset();
    }
    // A string's heap block, when it has one (short strings live inside the op).
    auto heap = [](const std::string& s) {
        return s.capacity() > std::string{}.capacity() ? s.capacity() + 1 : 0;
    };
    out.held_bytes = out.ops.capacity() * sizeof(txn_op);
    for (const auto& op : out.ops)
        out.held_bytes += op.params.held_bytes() + heap(op.body) + heap(op.key) + heap(op.lock) +
                          heap(op.name) + heap(op.content_type);
    return out;
}

} // namespace fk::proxy::detail
