// The body of POST /v1/transactions (proxy/detail/txn_body.hpp): every op kind, the header
// defaults, and each refusal with the index of the op at fault.
#include "proxy/detail/txn_body.hpp"

#include <doctest/doctest.h>

#include <string>

using fk::errc;
using fk::proxy::detail::decode_base64;
using fk::proxy::detail::parse_txn_body;
using fk::proxy::detail::txn_body;
using fk::proxy::detail::txn_body_rules;
using kind = fk::store::txn_op::kind;

namespace {

txn_body parse(const std::string& body, txn_body_rules rules = {}) {
    return parse_txn_body(body, rules);
}

// A refusal: its code, its op (nullopt: none), and a part of its message.
void check_refused(const std::string& body, std::optional<std::size_t> op_index,
                   std::string_view part, txn_body_rules rules = {},
                   errc code = errc::invalid_request) {
    CAPTURE(body);
    auto b = parse(body, std::move(rules));
    CHECK(b.error == code);
    CHECK(b.op_index == op_index);
    CHECK_MESSAGE(b.message.find(part) != std::string::npos, b.message);
    CHECK(b.ops.empty());
}

std::string wrap(const std::string& op) {
    return R"({"ops": [)" + op + "]}";
}

} // namespace

TEST_CASE("txn body: every op kind with its fields") {
    txn_body_rules rules;
    rules.operations = true;
    auto b = parse(R"({"ops": [
        {"op": "put", "key": "a/b", "token": 5, "lock": "L", "body": "héllo",
         "content_type": "text/plain", "if_match": 3, "if_none_match": "*"},
        {"op": "put", "key": "c", "token": "6", "body_base64": "AAEC/w==", "if_match": "*"},
        {"op": "delete", "key": "d", "token": 5, "lock": "L", "if_match": 2},
        {"op": "fence", "lock": "F", "token": 0},
        {"op": "check", "lock": "G", "token": 9223372036854775807},
        {"op": "check_version", "key": "e", "version": 4},
        {"op": "check_version", "key": "f", "absent": true},
        {"op": "operation", "name": "credit", "params": [1, "x", null, 1.50, [1, {"a": -0}]],
         "lock": "acct", "token": 7}
    ]})",
                   rules);
    REQUIRE_MESSAGE(b.error == errc::ok, b.message);
    REQUIRE(b.ops.size() == 8);
    const auto& put = b.ops[0];
    CHECK(put.op == kind::put);
    CHECK(put.key == "a/b");
    CHECK(put.lock == "L");
    CHECK(put.token == 5);
    CHECK(put.body == "h\xc3\xa9llo");
    CHECK(put.content_type == "text/plain");
    CHECK(put.pre.if_match == 3);
    CHECK_FALSE(put.pre.if_match_any);
    CHECK(put.pre.if_none_match_any);
    const auto& put2 = b.ops[1];
    CHECK(put2.lock == "c"); // the default lock is the key
    CHECK(put2.token == 6);
    CHECK(put2.body == std::string("\x00\x01\x02\xff", 4));
    CHECK(put2.content_type.empty()); // as a single PUT without Content-Type
    CHECK(put2.pre.if_match_any);
    CHECK_FALSE(put2.pre.if_match);
    CHECK(b.ops[2].op == kind::remove);
    CHECK(b.ops[2].pre.if_match == 2);
    CHECK(b.ops[3].op == kind::fence);
    CHECK(b.ops[3].lock == "F");
    CHECK(b.ops[3].token == 0);
    CHECK(b.ops[4].op == kind::check);
    CHECK(b.ops[4].token == 9223372036854775807);
    CHECK(b.ops[5].op == kind::check_version);
    CHECK(b.ops[5].version == 4);
    CHECK(b.ops[6].op == kind::check_version);
    CHECK_FALSE(b.ops[6].version);
    const auto& op = b.ops[7];
    CHECK(op.op == kind::operation);
    CHECK(op.name == "credit");
    CHECK(op.lock == "acct");
    CHECK(op.token == 7);
    REQUIRE(op.params.size() == 5);
    CHECK(op.params.at(0) == "1");
    CHECK(op.params.at(1) == "x");
    CHECK_FALSE(op.params.at(2));
    CHECK(op.params.at(3) == "1.50"); // as written, like POST /v1/operations
    CHECK(op.params.at(4) == R"([1,{"a":-0}])");
}

TEST_CASE("txn body: the headers' token and lock are defaults") {
    txn_body_rules rules;
    rules.token = 42;
    rules.lock = "H";
    rules.operations = true;
    auto b = parse(R"({"ops": [{"op": "put", "key": "a", "body": ""},
                               {"op": "put", "key": "b", "body": "", "token": 43, "lock": "M"},
                               {"op": "fence"},
                               {"op": "operation", "name": "n", "params": []}]})",
                   rules);
    REQUIRE_MESSAGE(b.error == errc::ok, b.message);
    CHECK(b.ops[0].lock == "H");
    CHECK(b.ops[0].token == 42);
    CHECK(b.ops[1].lock == "M");
    CHECK(b.ops[1].token == 43);
    CHECK(b.ops[2].lock == "H");
    CHECK(b.ops[3].lock == "H");
    CHECK(b.ops[3].token == 42);
}

TEST_CASE("txn body: a missing token or lock names the op") {
    check_refused(wrap(R"({"op": "put", "key": "a", "body": ""})"), 0, "needs a token");
    check_refused(wrap(R"({"op": "delete", "key": "a", "token": 1},
                          {"op": "fence", "token": 1})"),
                  1, "needs a lock");
    check_refused(wrap(R"({"op": "check", "lock": "l"})"), 0, "needs a token");
    txn_body_rules t;
    t.token = 1;
    check_refused(wrap(R"({"op": "check"})"), 0, "needs a lock", t);
}

TEST_CASE("txn body: the body's shape") {
    for (const char* bad :
         {"", "[]", "{}", "5", R"({"ops": {}})", R"({"ops": 1})", R"({"ops": [], "x": 1})",
          R"({"opz": []})", R"({"ops": [)", R"({"ops": []} x)"}) {
        CAPTURE(bad);
        auto b = parse(bad);
        CHECK(b.error == errc::invalid_request);
        CHECK_FALSE(b.op_index);
    }
    check_refused(R"({"ops": [], "ops": []})", std::nullopt, "duplicate key 'ops'");
    // Not an object in the array: the op is named.
    check_refused(wrap(R"({"op": "fence", "lock": "l", "token": 1}, 5)"), 1, "op 1 is not");
    check_refused(wrap(R"([])"), 0, "op 0 is not");
    // Invalid JSON inside an op names the op.
    check_refused(R"({"ops": [{"op": "fence", "lock": "l", "token": 1}, {"op": )", 1,
                  "not valid JSON");
    // An empty transaction: validate_txn's refusal.
    check_refused(R"({"ops": []})", 0, "at least one op");
}

TEST_CASE("txn body: fields, kinds and types") {
    check_refused(wrap(R"({"key": "a"})"), 0, "no 'op' field");
    check_refused(wrap(R"({"op": "upsert"})"), 0, "'op' must be one of");
    check_refused(wrap(R"({"op": 1})"), 0, "'op' must be");
    check_refused(wrap(R"({"op": "fence", "lock": "l", "token": 1, "color": "red"})"), 0,
                  "unknown field 'color'");
    check_refused(wrap(R"({"op": "fence", "lock": "l", "token": 1, "key": "k"})"), 0,
                  "'key' is not a field of a fence op");
    check_refused(wrap(R"({"op": "delete", "key": "k", "token": 1, "body": ""})"), 0,
                  "'body' is not a field of a delete op");
    check_refused(wrap(R"({"op": "check_version", "key": "k", "version": 1, "token": 1})"), 0,
                  "'token' is not a field");
    check_refused(wrap(R"({"op": "fence", "lock": "l", "token": 1, "lock": "m"})"), 0,
                  "duplicate key 'lock'");
    check_refused(wrap(R"({"op": "fence", "lock": ["l"], "token": 1})"), 0, "'lock' must be");
    check_refused(wrap(R"({"op": "fence", "lock": {"a": 1}, "token": 1})"), 0, "'lock' must be");
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body": 5})"), 0,
                  "'body' must be a string");
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body": null})"), 0,
                  "'body' must be");
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1})"), 0,
                  "exactly one of 'body' and 'body_base64'");
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body": "", "body_base64": ""})"),
                  0, "exactly one of 'body' and 'body_base64'");
    check_refused(wrap(R"({"op": "check_version", "key": "k"})"), 0,
                  "exactly one of 'version' and 'absent'");
    check_refused(wrap(R"({"op": "check_version", "key": "k", "version": 1, "absent": true})"), 0,
                  "exactly one of 'version' and 'absent'");
    check_refused(wrap(R"({"op": "check_version", "key": "k", "absent": false})"), 0,
                  "'absent' must be true");
    check_refused(wrap(R"({"op": "check_version", "key": "k", "version": 0})"), 0,
                  "'version' must be");
    check_refused(wrap(R"({"op": "check_version", "key": "k", "version": "3"})"), 0,
                  "'version' must be");
    check_refused(wrap(R"({"op": "check_version", "version": 3})"), 0, "needs a 'key'");
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body": "", "if_match": 0})"), 0,
                  "'if_match' must be");
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body": "", "if_match": "\"3\""})"),
                  0, "'if_match' must be");
    check_refused(
        wrap(R"({"op": "put", "key": "k", "token": 1, "body": "", "if_none_match": "\"3\""})"), 0,
        "'if_none_match' must be");
    check_refused(
        wrap(R"({"op": "put", "key": "k", "token": 1, "body": "", "content_type": "a\r\nb: c"})"),
        0, "'content_type' must be");
    check_refused(wrap(R"({"op": "operation", "params": []})"), 0, "needs a 'name'");
}

TEST_CASE("txn body: tokens as in Fencing-Token") {
    auto token_of = [](const std::string& t) {
        return parse(wrap(R"({"op": "fence", "lock": "l", "token": )" + t + "}"));
    };
    CHECK(token_of("0").ops.at(0).token == 0);
    CHECK(token_of("\"0\"").ops.at(0).token == 0);
    CHECK(token_of("\"9223372036854775807\"").ops.at(0).token == 9223372036854775807);
    for (const char* bad : {"-1", "1.0", "1e3", "9223372036854775808", "\"\"", "\"01\"", "\"-1\"",
                            "\"+1\"", "\"1 2\"", "\"9223372036854775808\"", "true", "null"}) {
        CAPTURE(bad);
        auto b = token_of(bad);
        CHECK(b.error == errc::invalid_request);
        CHECK(b.op_index == 0);
        CHECK(b.message.find("'token' must be a fencing token") != std::string::npos);
    }
}

TEST_CASE("txn body: names follow the single writes' rules") {
    check_refused(wrap(R"({"op": "put", "key": "", "token": 1, "body": ""})"), 0, "'key' must be");
    check_refused(wrap(R"({"op": "put", "key": "a/../b", "token": 1, "body": ""})"), 0,
                  "'key' must be");
    check_refused(wrap(R"({"op": "put", "key": "a\u0001", "token": 1, "body": ""})"), 0,
                  "'key' must be");
    check_refused(wrap(R"({"op": "fence", "lock": "", "token": 1})"), 0, "'lock' must be");
    check_refused(wrap(R"({"op": "fence", "lock": "a\u007f", "token": 1})"), 0, "'lock' must be");
    check_refused(
        wrap(R"({"op": "fence", "lock": ")" + std::string(1025, 'x') + R"(", "token": 1})"), 0,
        "'lock' must be");
    CHECK(parse(wrap(R"({"op": "fence", "lock": ")" + std::string(1024, 'x') + R"(", "token": 1})"))
              .error == errc::ok);
}

TEST_CASE("txn body: base64") {
    CHECK(decode_base64("") == "");
    CHECK(decode_base64("Zg==") == "f");
    CHECK(decode_base64("Zm8=") == "fo");
    CHECK(decode_base64("Zm9v") == "foo");
    CHECK(decode_base64("Zm9vYmFy") == "foobar");
    CHECK(decode_base64("+/+/") == "\xfb\xff\xbf");
    for (const char* bad : {"Zg", "Zg=", "Zh==", "Zm9=", "Zm9v\n", "Zm 9v",
                            "Z===", "====", "Zg==Zg==", "Zm-v", "Zm_v"}) {
        CAPTURE(bad);
        CHECK_FALSE(decode_base64(bad));
    }
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body_base64": "Zg"})"), 0,
                  "malformed base64");
}

TEST_CASE("txn body: a put's body above max_op_body_bytes is 413 with its op") {
    txn_body_rules rules;
    rules.max_op_body_bytes = 3;
    CHECK(parse(wrap(R"({"op": "put", "key": "k", "token": 1, "body": "abc"})"), rules).error ==
          errc::ok);
    CHECK(parse(wrap(R"({"op": "put", "key": "k", "token": 1, "body_base64": "Zm9v"})"), rules)
              .error == errc::ok);
    check_refused(wrap(R"({"op": "fence", "lock": "l", "token": 1},
                          {"op": "put", "key": "k", "token": 1, "body": "abcd"})"),
                  1, "limits.max_txn_op_body_bytes", rules, errc::body_too_large);
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body_base64": "Zm9vYg=="})"), 0,
                  "4 bytes", rules, errc::body_too_large);
}

TEST_CASE("txn body: the op limit stops parsing at the first op beyond it") {
    txn_body_rules rules;
    rules.max_ops = 2;
    const std::string op = R"({"op": "fence", "lock": "l", "token": 1})";
    CHECK(parse(wrap(op + "," + op), rules).error == errc::ok);
    // The third op is refused before it is read: what follows it is never parsed.
    check_refused(R"({"ops": [)" + op + "," + op + "," + op + ", this is not JSON", 2,
                  "at most 2 ops (limits.max_txn_ops)", rules);
}

TEST_CASE("txn body: validate_txn runs last") {
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body": ""},
                          {"op": "check_version", "key": "k", "absent": true})"),
                  1, "key 'k'");
    check_refused(wrap(R"({"op": "fence", "lock": "l", "token": 1},
                          {"op": "check", "lock": "l", "token": 2})"),
                  1, "same token");
    // One token per lock also across the defaults: a put's default lock is its key.
    check_refused(wrap(R"({"op": "put", "key": "k", "token": 1, "body": ""},
                          {"op": "fence", "lock": "k", "token": 2})"),
                  1, "same token");
}

TEST_CASE("txn body: operations") {
    check_refused(
        wrap(R"({"op": "operation", "name": "n", "params": [], "lock": "l", "token": 1})"), 0,
        "operation ops need the postgres store");
    txn_body_rules rules;
    rules.operations = true;
    rules.param_count = [](const std::string& name) -> std::optional<std::size_t> {
        if (name == "two")
            return 2;
        return std::nullopt;
    };
    rules.lock = "l";
    rules.token = 1;
    CHECK(parse(wrap(R"({"op": "operation", "name": "two", "params": [1, 2]})"), rules).error ==
          errc::ok);
    CHECK(parse(wrap(R"({"op": "operation", "name": "any", "params": [1, 2, 3]})"), rules).error ==
          errc::ok);
    check_refused(wrap(R"({"op": "fence"}, {"op": "operation", "name": "two", "params": [1]})"), 1,
                  "takes 2 parameters, got 1", rules);
    check_refused(wrap(R"({"op": "operation", "name": "two"})"), 0, "needs 'params'", rules);
    check_refused(wrap(R"({"op": "operation", "name": "two", "params": {}})"), 0,
                  "'params' must be an array", rules);
    check_refused(wrap(R"({"op": "operation", "name": "two", "params": [{"a": 1, "a": 2}, 1]})"), 0,
                  "duplicate key 'a' in parameter 1", rules);
    check_refused(wrap(R"({"op": "operation", "name": "two", "params": ["a\u0000", 1]})"), 0, "NUL",
                  rules);
    // Nesting: 32 levels in all, the body's object, ops, the op and params included.
    auto nested = [](int levels) {
        return wrap(R"({"op": "operation", "name": "any", "params": [)" +
                    std::string(static_cast<std::size_t>(levels), '[') +
                    std::string(static_cast<std::size_t>(levels), ']') + "]}");
    };
    CHECK(parse(nested(28), rules).error == errc::ok);
    check_refused(nested(29), 0, "nested deeper than 32", rules);
}

namespace {

// {"op": "operation", ...} with n parameters "1", the name before or after them.
std::string many_params(const std::string& name, std::size_t n, bool name_first = true) {
    std::string params = "[";
    for (std::size_t i = 0; i < n; ++i)
        params += i ? ",1" : "1";
    params += "]";
    return name_first
               ? R"({"op": "operation", "name": ")" + name + R"(", "params": )" + params + "}"
               : R"({"op": "operation", "params": )" + params + R"(, "name": ")" + name + R"("})";
}

txn_body_rules operation_rules() {
    txn_body_rules rules;
    rules.operations = true;
    rules.lock = "l";
    rules.token = 1;
    rules.param_count = [](const std::string& name) -> std::optional<std::size_t> {
        return name == "two" ? std::optional<std::size_t>{2} : std::nullopt;
    };
    rules.known = [](const std::string& name) { return name == "two" || name == "any"; };
    return rules;
}

} // namespace

TEST_CASE("txn body: an unknown operation keeps no parameters, and is named for the store's "
          "refusal") {
    // Issue 45: 100 such ops of 41,000 parameters each held 170 MB.
    for (bool name_first : {true, false}) {
        CAPTURE(name_first);
        std::string body = R"({"ops": [)" + many_params("any", 1000) + ",";
        for (int i = 0; i < 20; ++i)
            body += many_params("nope", 5000, name_first) + ",";
        body += many_params("any", 1000) + "]}";
        auto b = parse(body, operation_rules());
        REQUIRE(b.error == errc::ok);
        REQUIRE(b.unknown_operation == std::size_t{1}); // the first, as the store names it
        REQUIRE(b.ops.size() == 22);
        for (const auto& op : b.ops)
            CHECK(op.params.empty());
        CHECK(b.held_bytes < 64 * 1024);
    }
    // The refusals that come before the store's still answer: a malformed later op...
    check_refused(wrap(many_params("nope", 10) + R"(, {"op": "put"})"), 1, "needs a 'key'",
                  operation_rules());
    // ... and a later op's wrong count.
    check_refused(wrap(many_params("nope", 10) + "," + many_params("two", 3)), 1,
                  "operation 'two' takes 2 parameters, got 3", operation_rules());
    // Without `known`, every name counts as known (the store decides).
    auto rules = operation_rules();
    rules.known = nullptr;
    auto b = parse(wrap(many_params("nope", 3)), rules);
    CHECK(b.error == errc::ok);
    CHECK_FALSE(b.unknown_operation);
    CHECK(b.ops.at(0).params.size() == 3);
}

TEST_CASE("txn body: a wrong parameter count keeps none of them, and says how many there were") {
    for (bool name_first : {true, false}) {
        CAPTURE(name_first);
        check_refused(wrap(many_params("two", 41000, name_first)), 0,
                      "operation 'two' takes 2 parameters, got 41000", operation_rules());
    }
}

TEST_CASE("txn body: what the ops hold is about the size of the body") {
    std::string body = R"({"ops": [)";
    for (int i = 0; i < 100; ++i)
        body += (i ? "," : "") + many_params("any", 4000);
    body += "]}";
    auto b = parse(body, operation_rules());
    REQUIRE(b.error == errc::ok);
    CHECK(b.ops.at(99).params.size() == 4000);
    CHECK(b.ops.at(99).params.at(3999) == "1");
    CAPTURE(body.size());
    CAPTURE(b.held_bytes);
    CHECK(b.held_bytes <= body.size() + 64 * 1024);
}
