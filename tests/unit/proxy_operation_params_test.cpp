#include "proxy/detail/operation_params.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

using fk::proxy::detail::max_params_depth;
using fk::proxy::detail::max_statement_params;
using fk::proxy::detail::parse_operation_params;

namespace {

using values = std::vector<std::optional<std::string>>;

values ok(const std::string& body, std::optional<std::size_t> takes = std::nullopt) {
    auto p = parse_operation_params(body, takes, "op");
    CAPTURE(body);
    CHECK(p.error == "");
    values out;
    for (auto v : p.values)
        out.push_back(v ? std::optional<std::string>{*v} : std::nullopt);
    return out;
}

std::string err(const std::string& body, std::optional<std::size_t> takes = std::nullopt) {
    auto p = parse_operation_params(body, takes, "op");
    CAPTURE(body);
    CHECK(p.error != "");
    CHECK(p.values.empty());
    return p.error;
}

bool contains(const std::string& s, std::string_view part) {
    return s.find(part) != std::string::npos;
}

// {"params":[1,1,...]} with n parameters.
std::string ones(std::size_t n) {
    std::string body = R"({"params":[)";
    body.reserve(body.size() + 2 * n + 2);
    for (std::size_t i = 0; i < n; ++i)
        body += i ? ",1" : "1";
    return body + "]}";
}

} // namespace

TEST_CASE("operation params: every number as written, never through a double") {
    // Each is passed as its own text; the database casts it to the column's type.
    for (const char* n :
         {"123456789012345678901234567890", "0.30000000000000000001", "1e-400",
          "18446744073709551616", "18446744073709551615", "9223372036854775807",
          "-9223372036854775808", "-9223372036854775809", "0", "-0", "-0.0", "1.0", "1.10", "1E+5",
          "2.5e-3", "-17", "4.9406564584124654e-324", "1.7976931348623157e308"}) {
        CAPTURE(n);
        auto v = ok(std::string(R"({"params":[)") + n + "]}");
        REQUIRE(v.size() == 1);
        CHECK(v[0] == n);
    }
    // Inside an array or object parameter (json/jsonb) too.
    auto v = ok(R"({"params":[[1.10, 123456789012345678901234567890, -0],
                              {"a": 0.30000000000000000001, "b": [1e-400]}]})");
    REQUIRE(v.size() == 2);
    CHECK(v[0] == "[1.10,123456789012345678901234567890,-0]");
    CHECK(v[1] == R"({"a":0.30000000000000000001,"b":[1e-400]})");
}

TEST_CASE("operation params: a number the JSON parser cannot hold is refused, not rounded") {
    for (const char* n : {"1e400", "-1e400", "1.8e308"}) {
        CAPTURE(n);
        auto e = err(std::string(R"({"params":[)") + n + "]}");
        CHECK(contains(e, "beyond"));
        CHECK(contains(e, "as a JSON string"));
    }
    // As a string it arrives intact.
    CHECK(ok(R"({"params":["1e400"]})") == values{"1e400"});
}

TEST_CASE("operation params: strings, null, booleans, arrays and objects") {
    auto v = ok(R"({"params":[1, -2.5, "s", null, true, false, [1,"a"], {"k":1}, "",
                              "a\"b\\c\u00e9\n", [], {}, [null, true, {"x": ["y"]}]]})");
    REQUIRE(v.size() == 13);
    CHECK(v[0] == "1");
    CHECK(v[1] == "-2.5");
    CHECK(v[2] == "s");
    CHECK_FALSE(v[3]);
    CHECK(v[4] == "true");
    CHECK(v[5] == "false");
    CHECK(v[6] == R"([1,"a"])");
    CHECK(v[7] == R"({"k":1})");
    CHECK(v[8] == "");
    CHECK(v[9] == "a\"b\\c\xc3\xa9\n");
    CHECK(v[10] == "[]");
    CHECK(v[11] == "{}");
    CHECK(v[12] == R"([null,true,{"x":["y"]}])");
    // Keys keep their order; escapes in nested strings are written out again.
    CHECK(ok(R"({"params":[{"b":1,"a":"q\"\u0000"}]})") == values{R"({"b":1,"a":"q\"\u0000"})"});
    CHECK(ok(R"({"params":[]})").empty());
    CHECK(ok(" {\"params\" : [ ] } \n").empty());
}

TEST_CASE("operation params: bad shapes") {
    for (const char* body :
         {"", "x", "[]", "{}", "1", "null", R"("params")", R"({"params":{}})", R"({"params":1})",
          R"({"params":null})", R"({"params":[],"x":1})", R"({"x":1,"params":[]})",
          R"({"params":[1]} trailing)", R"({"params":[1]}{})", R"({"params":[1,]})",
          "{\"params\":[\"\xff\"]}"}) {
        CAPTURE(body);
        CHECK(contains(err(body), "{\"params\": [...]}"));
    }
    CHECK(contains(err("{\"params\":[\"a\\u0000b\"]}"), "NUL"));
    CHECK(contains(err(R"({"params":[1, 2)"), "not valid JSON"));
}

TEST_CASE("operation params: duplicate keys are refused at every depth") {
    CHECK(err(R"({"params":[1],"params":["x"]})") == "duplicate key 'params'");
    CHECK(err(R"({"params":[1],"params":["x"]})", 1) == "duplicate key 'params'");
    CHECK(err(R"({"params":[{"a":1,"a":2}]})") == "duplicate key 'a' in parameter 1");
    CHECK(err(R"({"params":[1, {"o":{"k":1,"k":1}}]})") == "duplicate key 'k' in parameter 2");
    // The same key in different objects is fine.
    CHECK(ok(R"({"params":[{"a":{"a":1},"b":{"a":2}}, {"a":3}]})").size() == 2);
    // Keys compare as the strings they decode to, whatever their spelling, and keys with
    // quotes and backslashes are found whole.
    CHECK(err(R"({"params":[{"a":1,"\u0061":2}]})") == "duplicate key 'a' in parameter 1");
    CHECK(err(R"({"params":[{"a\"":1,"a":2,"a\u0022":3}]})") ==
          "duplicate key 'a\\\"' in parameter 1");
    CHECK(ok(R"({"params":[{"a\\":1,"a\"":2,"a":3,"\\":4,"\"":5}]})").size() == 1);
    // An outer key after an inner object with the same keys, and the duplicate far from its
    // twin among many keys (the keys are kept as offsets, 4 bytes each: issue 45).
    CHECK(ok(R"({"params":[{"x":{"x":1,"y":2},"y":{"x":1}}]})").size() == 1);
    CHECK(err(R"({"params":[{"x":{"y":1},"y":2,"x":3}]})") == "duplicate key 'x' in parameter 1");
    std::string many = R"({"params":[1,{"k":0)";
    for (int i = 0; i < 3000; ++i)
        many += ",\"" + std::to_string(i) + "\":" + std::to_string(i);
    CHECK(ok(many + "}]}").size() == 2);
    CHECK(err(many + R"(,"1500":0}]})") == "duplicate key '1500' in parameter 2");
    CHECK(err(many + R"(,"k":{"k":0}}]})") == "duplicate key 'k' in parameter 2");
    // The value kept is the object as sent, compact, key order unchanged.
    CHECK(ok(R"({"params":[{"b":1, "a":{"d":2,"c":3}}]})") ==
          values{R"({"b":1,"a":{"d":2,"c":3}})"});
}

TEST_CASE("operation params: nesting is bounded") {
    // The body's object and the params array count: 30 more levels are the most.
    auto nested = [](std::size_t levels) {
        return R"({"params":[)" + std::string(levels, '[') + std::string(levels, ']') + "]}";
    };
    CHECK(ok(nested(max_params_depth - 2)).size() == 1);
    CHECK(contains(err(nested(max_params_depth - 1)), "nested deeper than 32"));
    CHECK(contains(err(nested(100000)), "nested deeper than 32"));
}

TEST_CASE("operation params: the statement's count, checked while parsing") {
    CHECK(ok(ones(2), 2).size() == 2);
    CHECK(ok(R"({"params":[]})", 0).empty());
    CHECK(err(ones(1), 2) == "operation 'op' takes 2 parameters, got 1");
    CHECK(err(ones(2), 1) == "operation 'op' takes 1 parameter, got more than 1");
    CHECK(err(ones(1), 0) == "operation 'op' takes 0 parameters, got more than 0");
    // Parsing stops at the first parameter too many: what follows it is never read (it
    // is not even JSON here), so a body costs no more than the statement's parameters.
    CHECK(err(R"({"params":[1, 2, 3, this is never read)", 2) ==
          "operation 'op' takes 2 parameters, got more than 2");
    CHECK(err(R"({"params":[1, [2, 3], {"a": [4]}, "x)", 2) ==
          "operation 'op' takes 2 parameters, got more than 2");
    // 4M parameters (8 MiB) for a one-parameter statement.
    CHECK(err(ones(4'000'000), 1) == "operation 'op' takes 1 parameter, got more than 1");
}

TEST_CASE("operation params: an unknown count is capped at PostgreSQL's limit") {
    CHECK(ok(ones(max_statement_params)).size() == max_statement_params);
    CHECK(err(ones(max_statement_params + 1)) ==
          "more than 65535 parameters (PostgreSQL's limit for a statement)");
    CHECK(err(ones(4'000'000)) ==
          "more than 65535 parameters (PostgreSQL's limit for a statement)");
}
