#include "proxy/auth.hpp"
#include "proxy/scopes.hpp"

#include <doctest/doctest.h>

#include <boost/beast/http/field.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

// Scoped credentials: the prefix matcher, the 403 decided from the head, transaction ops,
// the listing's plan, and who a request is (authenticator::identify).

using namespace fk;
using namespace fk::proxy;
namespace http = boost::beast::http;

namespace {

request head(http::verb method, std::string target,
             std::vector<std::pair<std::string, std::string>> fields = {}) {
    request r{method, target, 11};
    for (auto& [name, value] : fields)
        r.insert(name, value);
    return r;
}

std::optional<std::string> forbidden(const client_scope& s, http::verb method, std::string target,
                                     std::vector<std::pair<std::string, std::string>> fields = {}) {
    const auto h = head(method, target, std::move(fields));
    return forbidden_by_head(s, h, match_route(method, target));
}

const client_scope alpha = make_scope("alpha", {"a/"}, {"shared/"}, false, false);

} // namespace

TEST_CASE("scopes: prefixes cover names that start with them; write implies read") {
    CHECK(alpha.may_write("a/x"));
    CHECK(alpha.may_write("a/"));
    CHECK_FALSE(alpha.may_write("a"));
    CHECK_FALSE(alpha.may_write("ab/x"));
    CHECK_FALSE(alpha.may_write("shared/x"));
    CHECK(alpha.may_read("shared/x"));
    CHECK(alpha.may_read("a/x")); // write implies read
    CHECK_FALSE(alpha.may_read("b/x"));
    CHECK_FALSE(alpha.reads_everything());

    const auto none = make_scope("none", {}, {}, false, false);
    CHECK_FALSE(none.may_read("a"));
    CHECK_FALSE(none.may_write("a"));
    CHECK_FALSE(none.may_read(""));

    const auto all = make_scope("all", {""}, {}, false, false);
    CHECK(all.may_write("anything"));
    CHECK(all.reads_everything());
}

TEST_CASE("scopes: make_scope drops prefixes a shorter one covers") {
    const auto s = make_scope("s", {"a/b/", "a/"}, {"a/c", "x/", "x/"}, false, false);
    CHECK(s.write_prefixes == std::vector<std::string>{"a/"});
    CHECK(s.read_prefixes == std::vector<std::string>{"a/", "x/"});
}

TEST_CASE("scopes: the head decides resources, fences, floors, operations, metrics") {
    using v = http::verb;
    CHECK_FALSE(forbidden(alpha, v::get, "/v1/resources/a/x"));
    CHECK_FALSE(forbidden(alpha, v::head, "/v1/resources/shared/x"));
    CHECK(forbidden(alpha, v::get, "/v1/resources/b/x"));
    CHECK(forbidden(alpha, v::head, "/v1/resources/b/x"));
    CHECK_FALSE(forbidden(alpha, v::put, "/v1/resources/a/x"));
    CHECK(forbidden(alpha, v::put, "/v1/resources/shared/x")); // read only
    CHECK(forbidden(alpha, v::delete_, "/v1/resources/b/x"));
    // Key and lock both: another's lock on one's own key, and the reverse.
    CHECK(forbidden(alpha, v::put, "/v1/resources/a/x", {{"Fencing-Lock", "b/l"}}));
    CHECK(forbidden(alpha, v::delete_, "/v1/resources/a/x", {{"Fencing-Lock", "b/l"}}));
    CHECK(forbidden(alpha, v::put, "/v1/resources/b/x", {{"Fencing-Lock", "a/l"}}));
    CHECK_FALSE(forbidden(alpha, v::put, "/v1/resources/a/x", {{"Fencing-Lock", "a/l"}}));
    // Twice: each must be writable (the handler then refuses the pair with 400 anyway).
    CHECK(forbidden(alpha, v::put, "/v1/resources/a/x",
                    {{"Fencing-Lock", "a/l"}, {"Fencing-Lock", "b/l"}}));
    // A percent-encoded key is checked decoded.
    CHECK(forbidden(alpha, v::get, "/v1/resources/b%2Fx"));
    CHECK_FALSE(forbidden(alpha, v::get, "/v1/resources/a%2Fx"));

    CHECK_FALSE(forbidden(alpha, v::get, "/v1/fences/shared/l"));
    CHECK(forbidden(alpha, v::put, "/v1/fences/shared/l"));
    CHECK(forbidden(alpha, v::get, "/v1/fences/b/l"));
    CHECK_FALSE(forbidden(alpha, v::put, "/v1/fences/a/l"));

    CHECK(forbidden(alpha, v::put, "/v1/floors?prefix=a/"));
    CHECK_FALSE(forbidden(make_scope("o", {}, {}, false, true), v::put, "/v1/floors?prefix="));
    CHECK_FALSE(forbidden(alpha, v::get, "/v1/floors"));           // filtered
    CHECK_FALSE(forbidden(alpha, v::get, "/v1/fences?prefix=b/")); // filtered

    CHECK(forbidden(alpha, v::post, "/v1/operations/credit", {{"Fencing-Lock", "b/l"}}));
    CHECK_FALSE(forbidden(alpha, v::post, "/v1/operations/credit", {{"Fencing-Lock", "a/l"}}));

    CHECK(forbidden(alpha, v::get, "/metrics"));
    CHECK_FALSE(forbidden(make_scope("m", {}, {}, true, false), v::get, "/metrics"));

    // A transaction needs some write prefix, from the head: a client that may write
    // nothing (metrics only, read only, admin only) never has its body read.
    for (const auto& s :
         {make_scope("m", {}, {}, true, false), make_scope("r", {}, {"shared/"}, false, false),
          make_scope("o", {}, {}, false, true)}) {
        auto why = forbidden(s, v::post, "/v1/transactions");
        REQUIRE(why);
        CHECK(why->find("may not write any key or lock") != std::string::npos);
    }

    // Not decided here: the probes, a writer's transactions (per op), and targets that
    // fail to match.
    CHECK_FALSE(forbidden(alpha, v::get, "/healthz"));
    CHECK_FALSE(forbidden(alpha, v::post, "/v1/transactions"));
    CHECK_FALSE(forbidden(alpha, v::get, "/v1/nothing"));
    CHECK_FALSE(forbidden(alpha, v::post, "/v1/resources/b/x")); // 405
}

TEST_CASE("scopes: transaction ops") {
    using kind = store::txn_op::kind;
    auto op = [](kind k, std::string key, std::string lock) {
        store::txn_op o;
        o.op = k;
        o.key = std::move(key);
        o.lock = std::move(lock);
        return o;
    };
    CHECK_FALSE(forbidden_op(alpha, op(kind::put, "a/k", "a/l")));
    CHECK(forbidden_op(alpha, op(kind::put, "a/k", "b/l")));
    CHECK(forbidden_op(alpha, op(kind::put, "b/k", "a/l")));
    CHECK(forbidden_op(alpha, op(kind::remove, "a/k", "shared/l")));
    CHECK(forbidden_op(alpha, op(kind::fence, "", "shared/l")));
    CHECK_FALSE(forbidden_op(alpha, op(kind::fence, "", "a/l")));
    CHECK(forbidden_op(alpha, op(kind::operation, "", "b/l")));
    CHECK_FALSE(forbidden_op(alpha, op(kind::check, "", "shared/l")));
    CHECK(forbidden_op(alpha, op(kind::check, "", "b/l")));
    CHECK_FALSE(forbidden_op(alpha, op(kind::check_version, "shared/k", "")));
    CHECK(forbidden_op(alpha, op(kind::check_version, "b/k", "")));
}

TEST_CASE("scopes: the listing's store queries") {
    using list = std::vector<std::string>;
    CHECK(readable_prefixes_under(alpha, "") == list{"a/", "shared/"});
    CHECK(readable_prefixes_under(alpha, "a/x") == list{"a/x"}); // inside: as asked
    CHECK(readable_prefixes_under(alpha, "a/") == list{"a/"});
    CHECK(readable_prefixes_under(alpha, "sh") == list{"shared/"});
    CHECK(readable_prefixes_under(alpha, "b/").empty());
    CHECK(readable_prefixes_under(alpha, "a").empty() == false);
    CHECK(readable_prefixes_under(alpha, "a") == list{"a/"});
}

namespace {

struct token_dir {
    std::filesystem::path dir;
    token_dir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "fk_scopes_XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        dir = tmpl;
    }
    ~token_dir() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string file(const std::string& name, const std::string& token) const {
        const auto p = dir / name;
        std::ofstream(p, std::ios::binary) << token << "\n";
        return p.string();
    }
};

config::auth_client client(std::string name, std::optional<std::string> token_file,
                           std::optional<std::string> identity, std::vector<std::string> write) {
    config::auth_client c;
    c.name = std::move(name);
    c.token_file = std::move(token_file);
    c.tls_identity = std::move(identity);
    c.write_prefixes = std::move(write);
    return c;
}

} // namespace

TEST_CASE("identify: tokens, certificate identities, and the modes") {
    token_dir d;
    auto loaded = load_clients({client("alpha", d.file("a", "tok-a"), std::nullopt, {"a/"}),
                                client("beta", d.file("b", "tok-b"), std::nullopt, {"b/"}),
                                client("cert", std::nullopt, "c.example", {"c/"})});
    REQUIRE(loaded.ok());
    authenticator auth;
    CHECK(auth.identify(std::nullopt, "").authenticated); // off: everyone, no scope
    CHECK(auth.identify(std::nullopt, "").scope == nullptr);
    auth.set_clients(std::move(loaded.clients));
    CHECK(auth.enabled());
    CHECK(auth.scoped());

    auto name_of = [&](std::optional<std::string_view> a, std::string_view id) -> std::string {
        const auto c = auth.identify(a, id);
        if (!c.authenticated)
            return "401";
        REQUIRE(c.scope);
        return c.scope->name;
    };
    CHECK(name_of("Bearer tok-a", "") == "alpha");
    CHECK(name_of("bearer   tok-b ", "") == "beta");
    CHECK(name_of("Bearer tok-c", "") == "401");
    CHECK(name_of("Basic tok-a", "") == "401");
    CHECK(name_of("", "") == "401");           // given twice
    CHECK(name_of("", "c.example") == "401");  // given twice: never the certificate instead
    CHECK(name_of(std::nullopt, "") == "401"); // nothing
    CHECK(name_of(std::nullopt, "c.example") == "cert");
    CHECK(name_of(std::nullopt, "d.example") == "401");
    // A token, when sent, decides.
    CHECK(name_of("Bearer tok-b", "c.example") == "beta");
    CHECK(name_of("Bearer wrong", "c.example") == "401");
    CHECK(auth.authorized("Bearer tok-a"));
    CHECK_FALSE(auth.authorized("Bearer tok-x"));

    // Back to the single token: full access, no scope.
    auth.set_token(std::string{"single"});
    CHECK_FALSE(auth.scoped());
    const auto c = auth.identify("Bearer single", "");
    CHECK(c.authenticated);
    CHECK(c.scope == nullptr);
    CHECK_FALSE(auth.identify("Bearer tok-a", "").authenticated);
}

TEST_CASE("load_clients: a bad token file or a shared token fails the whole list") {
    token_dir d;
    auto missing = load_clients({client("alpha", d.file("a", "tok-a"), std::nullopt, {}),
                                 client("beta", (d.dir / "nope").string(), std::nullopt, {})});
    CHECK_FALSE(missing.ok());
    CHECK(missing.error.find("'beta'") != std::string::npos);
    auto shared = load_clients({client("alpha", d.file("a", "same"), std::nullopt, {}),
                                client("beta", d.file("b", "same"), std::nullopt, {})});
    CHECK_FALSE(shared.ok());
    CHECK(shared.error.find("same token") != std::string::npos);
    CHECK(shared.error.find("'same'") == std::string::npos); // never the token
}
