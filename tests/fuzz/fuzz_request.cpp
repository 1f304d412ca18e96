// Fuzzes the whole request path short of the socket: raw bytes → Beast's request parser
// (with the configured header and body limits) → router → handlers → fence rule → an
// in-memory store. Several pipelined requests share one store, so the fuzzer can build
// up fences and keys and then attack them.
//
// Besides "never crash", it checks docs/api.md#the-fence-rule, #fence-floors and #errors on
// every response:
// - a write (PUT/DELETE resource, PUT fence, POST operation) answered 2xx was applied by
//   the store with the token and lock the request named, never below the lock's effective
//   fence (its own fence and every fence floor over it); a write below it was refused;
// - a write answered with anything else left every key and fence it touched unchanged;
// - PUT /v1/floors answered 2xx raised that prefix's floor to the request's token, from
//   below it; floors never go down; GET /v1/floors lists them sorted by prefix, and
//   GET /v1/fences/{lock} answers the effective fence, naming a floor that covers the lock;
// - a 2xx with Idempotent-Replayed: true rests on one store call answered from an
//   Idempotency-Key record, which changed nothing;
// - fences never go down;
// - a store failure (injected) never becomes a 2xx;
// - every response has X-Request-Id, and every error is JSON {error, message} whose code
//   matches its status (405 with Allow, 409 stale_token with current_token > token).
//
// The bytes go through the session's intake first (proxy/detail/request_feed.hpp and
// proxy/admission.hpp: the head and body bounds, framing, credentials, body rules,
// trailers), so what reaches the handler is what a real connection would deliver.
//
// Input layout: byte 0 chooses a store failure to inject (bits 0-1: none, unavailable,
// outcome_unknown, internal), the request it hits (bits 2-4), whether auth is on (bit 5,
// token "secret") and whether the operation "touch" declares its parameter count (bit 6:
// 2, so the parser stops at the third; else unknown, as before its first prepare); the
// rest is the bytes a client would send.

#include "backends/log/logging.hpp"
#include "config/settings.hpp"
#include "fence/error.hpp"
#include "fence/token.hpp"
#include "proxy/admission.hpp"
#include "proxy/detail/request_feed.hpp"
#include "proxy/error_response.hpp"
#include "proxy/handlers.hpp"
#include "proxy/router.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/support/memory_store.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/http/parser.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace st = fk::store; // not "store": that names the base class inside recording_store
namespace net = fk::net;
namespace proxy = fk::proxy;
namespace fence = fk::fence;
using fk::errc;

enum class call_kind { put, remove, advance, operation, floor_raise, read, transaction };

// One store call as the store saw it, with the state of its key and lock around it.
struct store_call {
    call_kind kind = call_kind::read;
    std::string key; // empty for fence and operation calls
    std::string lock;
    fence::token_t token = 0;
    std::string body; // put only
    errc result = errc::ok;
    bool replayed = false; // answered from an Idempotency-Key record
    std::optional<std::string> body_before, body_after;
    std::optional<fence::token_t> fence_before, fence_after;
    // Writes: the lock's effective fence before the call (own fence and floors).
    std::optional<fence::token_t> effective_before;
    // floor_raise: the prefix and its floor around the call.
    std::optional<std::string> prefix;
    std::optional<fence::token_t> floor_before, floor_after;
    std::size_t floors_before = 0, floors_after = 0; // how many floors the store keeps
    // transaction: its ops, and the bodies of their keys and fences of their locks around
    // the call (in op order; nullopt where the op names none).
    std::vector<st::txn_op> ops;
    std::vector<std::optional<std::string>> op_bodies_before, op_bodies_after;
    std::vector<std::optional<fence::token_t>> op_fences_before, op_fences_after;
};

// Forwards to the in-memory store and records every call.
class recording_store final : public st::store {
public:
    explicit recording_store(fk::test::memory_store& inner) : inner_(inner) {}

    std::vector<store_call> calls;

    net::awaitable<st::write_result> put(st::put_request req) override {
        auto c = begin(call_kind::put, req.key, req.lock, req.token);
        c.body = req.body;
        auto r = co_await inner_.put(std::move(req));
        finish(c, r.error, r.replayed);
        co_return r;
    }
    net::awaitable<st::write_result> remove(st::delete_request req) override {
        auto c = begin(call_kind::remove, req.key, req.lock, req.token);
        auto r = co_await inner_.remove(std::move(req));
        finish(c, r.error, r.replayed);
        co_return r;
    }
    net::awaitable<st::object_result> get(std::string key, bool with_body) override {
        auto c = begin(call_kind::read, key, {}, 0);
        auto r = co_await inner_.get(std::move(key), with_body);
        finish(c, r.error);
        co_return r;
    }
    net::awaitable<st::write_result> advance_fence(st::fence_request req) override {
        auto c = begin(call_kind::advance, {}, req.lock, req.token);
        auto r = co_await inner_.advance_fence(std::move(req));
        finish(c, r.error, r.replayed);
        co_return r;
    }
    net::awaitable<st::fence_result> read_fence(std::string lock) override {
        auto c = begin(call_kind::read, {}, lock, 0);
        auto r = co_await inner_.read_fence(std::move(lock));
        finish(c, r.error);
        co_return r;
    }
    net::awaitable<st::list_result> list_fences(st::list_request req) override {
        auto c = begin(call_kind::read, {}, {}, 0);
        auto r = co_await inner_.list_fences(std::move(req));
        finish(c, r.error);
        co_return r;
    }
    net::awaitable<st::write_result> raise_floor(st::floor_request req) override {
        auto c = begin(call_kind::floor_raise, {}, {}, req.token);
        c.prefix = req.prefix;
        c.floor_before = inner_.floor_of(req.prefix);
        auto r = co_await inner_.raise_floor(std::move(req));
        c.floor_after = inner_.floor_of(*c.prefix);
        finish(c, r.error, r.replayed);
        co_return r;
    }
    net::awaitable<st::floors_result> list_floors() override {
        auto c = begin(call_kind::read, {}, {}, 0);
        auto r = co_await inner_.list_floors();
        finish(c, r.error);
        co_return r;
    }
    bool supports_operations() const noexcept override { return inner_.supports_operations(); }
    std::optional<std::size_t> operation_param_count(const std::string& name) const override {
        return inner_.operation_param_count(name);
    }
    bool has_operation(const std::string& name) const override {
        return inner_.has_operation(name);
    }
    net::awaitable<st::operation_result> run_operation(st::operation_request req) override {
        auto c = begin(call_kind::operation, {}, req.lock, req.token);
        auto r = co_await inner_.run_operation(std::move(req));
        finish(c, r.error, r.replayed);
        co_return r;
    }
    // Recorded with the state of every key and lock its ops name (check_transaction).
    net::awaitable<st::txn_result> transact(st::txn_request req) override {
        auto c = begin(call_kind::transaction, {}, {}, 0);
        c.ops = req.ops;
        snapshot(c.ops, c.op_bodies_before, c.op_fences_before);
        auto r = co_await inner_.transact(std::move(req));
        snapshot(c.ops, c.op_bodies_after, c.op_fences_after);
        finish(c, r.error, r.replayed);
        co_return r;
    }
    bool ready() const noexcept override { return inner_.ready(); }
    void stop() override { inner_.stop(); }

private:
    void snapshot(const std::vector<st::txn_op>& ops,
                  std::vector<std::optional<std::string>>& bodies,
                  std::vector<std::optional<fence::token_t>>& fences) const {
        for (const auto& op : ops) {
            bodies.push_back(op.key.empty() ? std::nullopt : inner_.body_of(op.key));
            fences.push_back(op.op == st::txn_op::kind::check_version ? std::nullopt
                                                                      : inner_.fence_of(op.lock));
        }
    }
    store_call begin(call_kind kind, const std::string& key, const std::string& lock,
                     fence::token_t token) const {
        store_call c;
        c.kind = kind;
        c.key = key;
        c.lock = lock;
        c.token = token;
        if (!key.empty())
            c.body_before = inner_.body_of(key);
        if (!lock.empty()) {
            c.fence_before = inner_.fence_of(lock);
            c.effective_before = inner_.effective_fence_of(lock);
        }
        c.floors_before = inner_.floor_count();
        return c;
    }
    void finish(store_call& c, errc result, bool replayed = false) {
        c.result = result;
        c.replayed = replayed;
        if (!c.key.empty())
            c.body_after = inner_.body_of(c.key);
        if (!c.lock.empty())
            c.fence_after = inner_.fence_of(c.lock);
        c.floors_after = inner_.floor_count();
        calls.push_back(std::move(c));
    }

    fk::test::memory_store& inner_;
};

const fk::config::settings& fuzz_settings() {
    static const fk::config::settings s = [] {
        fk::config::settings v;
        v.http.max_header_bytes = 1024; // small, so that the fuzzer reaches the limits
        v.http.max_body_bytes = 4096;
        v.operations["touch"] = fk::config::operation{"select 1"};
        return v;
    }();
    return s;
}

std::optional<errc> code_named(std::string_view name) {
    for (int i = 1; i <= static_cast<int>(errc::outcome_unknown); ++i)
        if (fk::to_string(static_cast<errc>(i)) == name)
            return static_cast<errc>(i);
    return std::nullopt;
}

bool is_2xx(const proxy::response& res) {
    return res.result_int() >= 200 && res.result_int() < 300;
}

struct write_request {
    call_kind kind;
    std::string name; // key, lock or operation name from the path
};

// What the router makes of a request that changes state, if it does.
std::optional<write_request> write_of(const proxy::request& req) {
    const auto m = proxy::match_route(req.method(), req.target());
    if (m.error != errc::ok)
        return std::nullopt;
    const auto verb = req.method();
    if (m.kind == proxy::route::resource && verb == boost::beast::http::verb::put)
        return write_request{call_kind::put, m.name};
    if (m.kind == proxy::route::resource && verb == boost::beast::http::verb::delete_)
        return write_request{call_kind::remove, m.name};
    if (m.kind == proxy::route::fence && verb == boost::beast::http::verb::put)
        return write_request{call_kind::advance, m.name};
    if (m.kind == proxy::route::operation && verb == boost::beast::http::verb::post)
        return write_request{call_kind::operation, m.name};
    if (m.kind == proxy::route::floors && verb == boost::beast::http::verb::put)
        return write_request{call_kind::floor_raise, m.name}; // the prefix
    return std::nullopt;
}

// The token the request carries, read from its headers the way docs/api.md#tokens says.
fence::token_result token_in(const proxy::request& req) {
    auto first = [&](std::string_view field) {
        std::size_t count = 0;
        std::optional<std::string_view> value;
        auto [it, end] = req.equal_range(field);
        for (; it != end; ++it)
            if (count++ == 0)
                value = std::string_view{it->value()};
        return std::pair{count, value};
    };
    const auto [n, v] = first("Fencing-Token");
    const auto [an, av] = first("X-Fencing-Token");
    return fence::token_from_headers(n, v, an, av);
}

void check_error_body(const proxy::response& res, bool head) {
    FK_FUZZ_CHECK(res[boost::beast::http::field::content_type] == "application/json");
    if (head)
        return;
    const auto body = nlohmann::json::parse(res.body(), nullptr, false);
    FK_FUZZ_CHECK(body.is_object());
    FK_FUZZ_CHECK(body.contains("error") && body["error"].is_string());
    FK_FUZZ_CHECK(body.contains("message") && body["message"].is_string());
    const auto code = code_named(body["error"].get<std::string>());
    FK_FUZZ_CHECK(code.has_value());
    FK_FUZZ_CHECK(static_cast<unsigned>(proxy::status_for(*code)) == res.result_int());
    if (*code == errc::stale_token) {
        FK_FUZZ_CHECK(body.contains("token") && body.contains("current_token"));
        if (body.contains("prefix")) {
            // PUT /v1/floors: floors only go up, so an equal token is refused too.
            FK_FUZZ_CHECK(body["prefix"].is_string() && !body.contains("lock"));
            FK_FUZZ_CHECK(body["current_token"].get<std::int64_t>() >=
                          body["token"].get<std::int64_t>());
        } else {
            FK_FUZZ_CHECK(body.contains("lock") && body["lock"].is_string());
            FK_FUZZ_CHECK(body["current_token"].get<std::int64_t>() >
                          body["token"].get<std::int64_t>());
            // A floor named as the cause covers the lock.
            if (body.contains("floor"))
                FK_FUZZ_CHECK(
                    body["floor"].is_string() &&
                    body["lock"].get<std::string>().starts_with(body["floor"].get<std::string>()));
        }
    }
    if (*code == errc::method_not_allowed)
        FK_FUZZ_CHECK(!res[boost::beast::http::field::allow].empty());
}

// A transaction: all or nothing. Refused or replayed, nothing it names changed; applied,
// every put's key holds its body, every delete's key none, every lock a put, delete, fence
// or operation names has a fence of at least its token, and a check moved nothing.
void check_transaction(const store_call& c) {
    using kind = st::txn_op::kind;
    FK_FUZZ_CHECK(c.op_bodies_before.size() == c.ops.size() &&
                  c.op_bodies_after.size() == c.ops.size());
    for (std::size_t i = 0; i < c.ops.size(); ++i) {
        const auto& op = c.ops[i];
        if (op.op != kind::check_version && c.op_fences_before[i])
            FK_FUZZ_CHECK(c.op_fences_after[i] >= c.op_fences_before[i]); // never down
        if (c.result != errc::ok || c.replayed) {
            FK_FUZZ_CHECK(c.op_bodies_before[i] == c.op_bodies_after[i]);
            FK_FUZZ_CHECK(c.op_fences_before[i] == c.op_fences_after[i]);
            continue;
        }
        if (op.op == kind::put)
            FK_FUZZ_CHECK(c.op_bodies_after[i] == op.body);
        if (op.op == kind::remove)
            FK_FUZZ_CHECK(!c.op_bodies_after[i].has_value());
        if (op.op == kind::put || op.op == kind::remove || op.op == kind::fence ||
            op.op == kind::operation)
            FK_FUZZ_CHECK(c.op_fences_after[i] && *c.op_fences_after[i] >= op.token);
    }
}

// Store-level invariants for every recorded call.
void check_call(const store_call& c) {
    if (c.kind == call_kind::transaction)
        return check_transaction(c);
    if (c.fence_before && c.fence_after)
        FK_FUZZ_CHECK(*c.fence_after >= *c.fence_before); // fences never go down
    if (c.fence_before && !c.lock.empty())
        FK_FUZZ_CHECK(c.fence_after.has_value());     // nor disappear
    FK_FUZZ_CHECK(c.floors_after >= c.floors_before); // floors never disappear
    FK_FUZZ_CHECK(c.floors_after <= st::max_floors);
    if (c.kind == call_kind::floor_raise) {
        FK_FUZZ_CHECK(c.floor_before <= c.floor_after); // floors never go down
        if (c.result != errc::ok || c.replayed) {
            FK_FUZZ_CHECK(c.floor_before == c.floor_after);
            FK_FUZZ_CHECK(c.floors_before == c.floors_after);
            // Refused as stale only when the token is not above the prefix's floor.
            if (c.result == errc::stale_token)
                FK_FUZZ_CHECK(c.floor_before && c.token <= *c.floor_before);
            return;
        }
        // Raised from below, to the token.
        FK_FUZZ_CHECK(!c.floor_before || c.token > *c.floor_before);
        FK_FUZZ_CHECK(c.floor_after == c.token);
        return;
    }
    FK_FUZZ_CHECK(c.floors_before == c.floors_after); // only a raise adds one
    // A write below the effective fence is refused (lock_mismatch is checked first, and an
    // injected failure or a replay answers before the fence).
    if (c.kind != call_kind::read && !c.replayed && c.effective_before &&
        c.token < *c.effective_before)
        FK_FUZZ_CHECK(c.result != errc::ok);
    if (c.kind == call_kind::read || c.result != errc::ok || c.replayed) {
        // Reads, failed writes and replays change nothing they touch.
        FK_FUZZ_CHECK(c.body_before == c.body_after);
        FK_FUZZ_CHECK(c.fence_before == c.fence_after);
        return;
    }
    // An applied write passed the effective fence and moved the lock's own fence to its
    // token.
    FK_FUZZ_CHECK(!c.fence_before || c.token >= *c.fence_before);
    FK_FUZZ_CHECK(!c.effective_before || c.token >= *c.effective_before);
    FK_FUZZ_CHECK(c.fence_after == c.token);
    if (c.kind == call_kind::put)
        FK_FUZZ_CHECK(c.body_after == c.body);
    if (c.kind == call_kind::remove)
        FK_FUZZ_CHECK(!c.body_after.has_value());
}

// GET /v1/floors: {"floors": [{prefix, token, updated_at}, ...]} sorted bytewise by prefix,
// the store's floors. GET /v1/fences/{lock}: the lock's effective fence, and a floor named
// only when it covers the lock.
void check_read_body(const proxy::request& req, const proxy::response& res,
                     const fk::test::memory_store& memory) {
    if (res.result_int() != 200 || req.method() != boost::beast::http::verb::get)
        return;
    const auto m = proxy::match_route(req.method(), req.target());
    if (m.kind != proxy::route::floors && m.kind != proxy::route::fence)
        return;
    const auto body = nlohmann::json::parse(res.body(), nullptr, false);
    FK_FUZZ_CHECK(body.is_object());
    if (m.kind == proxy::route::fence) {
        FK_FUZZ_CHECK(body["lock"] == m.name);
        FK_FUZZ_CHECK(body["token"].is_number_integer());
        FK_FUZZ_CHECK(body["token"].get<std::int64_t>() == memory.effective_fence_of(m.name));
        FK_FUZZ_CHECK(body["updated_at"].is_string());
        if (body.contains("floor")) {
            FK_FUZZ_CHECK(body["floor"].is_string());
            const auto prefix = body["floor"].get<std::string>();
            FK_FUZZ_CHECK(m.name.starts_with(prefix));
            FK_FUZZ_CHECK(memory.floor_of(prefix) == body["token"].get<std::int64_t>());
        } else {
            FK_FUZZ_CHECK(memory.fence_of(m.name) == body["token"].get<std::int64_t>());
        }
        return;
    }
    FK_FUZZ_CHECK(body.size() == 1 && body.contains("floors") && body["floors"].is_array());
    FK_FUZZ_CHECK(body["floors"].size() == memory.floor_count());
    const std::string* previous = nullptr;
    for (const auto& f : body["floors"]) {
        FK_FUZZ_CHECK(f.is_object() && f.size() == 3);
        FK_FUZZ_CHECK(f["prefix"].is_string() && f["token"].is_number_integer() &&
                      f["updated_at"].is_string());
        const auto& prefix = f["prefix"].get_ref<const std::string&>();
        if (previous)
            FK_FUZZ_CHECK(*previous < prefix); // std::string compares bytewise
        previous = &prefix;
        FK_FUZZ_CHECK(memory.floor_of(prefix) == f["token"].get<std::int64_t>());
    }
}

void check_response(const proxy::request& req, const proxy::response& res,
                    const std::vector<store_call>& calls, std::optional<errc> injected) {
    const bool head = req.method() == boost::beast::http::verb::head;
    FK_FUZZ_CHECK(res.result_int() >= 200 && res.result_int() <= 599);
    FK_FUZZ_CHECK(!res["X-Request-Id"].empty());
    if (head)
        FK_FUZZ_CHECK(res.body().empty());
    if (res.result_int() >= 400)
        check_error_body(res, head);

    for (const auto& c : calls)
        check_call(c);

    // A transaction is its own request kind: one store call, answered 2xx exactly when it
    // committed (or was replayed), marked Idempotent-Replayed exactly when replayed.
    for (const auto& c : calls) {
        if (c.kind != call_kind::transaction)
            continue;
        FK_FUZZ_CHECK(calls.size() == 1);
        FK_FUZZ_CHECK(is_2xx(res) == (c.result == errc::ok));
        FK_FUZZ_CHECK((res["Idempotent-Replayed"] == "true") ==
                      (c.result == errc::ok && c.replayed));
        return;
    }
    const auto write = write_of(req);
    std::size_t applied = 0, replayed = 0;
    for (const auto& c : calls)
        if (c.kind != call_kind::read && c.result == errc::ok)
            ++(c.replayed ? replayed : applied);
    FK_FUZZ_CHECK((res["Idempotent-Replayed"] == "true") == (replayed == 1));
    FK_FUZZ_CHECK(replayed <= 1);

    if (replayed == 1) {
        // Answered from the record of an earlier request with the same key and
        // fingerprint: a 2xx to a write, nothing applied now.
        FK_FUZZ_CHECK(write.has_value() && is_2xx(res) && applied == 0);
        FK_FUZZ_CHECK(req.count("Idempotency-Key") == 1);
    } else if (!is_2xx(res)) {
        // Nothing the client was told failed reached the store.
        FK_FUZZ_CHECK(applied == 0);
    } else if (write) {
        // The 2xx rests on exactly one applied write, made with the request's own token
        // and name.
        FK_FUZZ_CHECK(applied == 1);
        const auto token = token_in(req);
        FK_FUZZ_CHECK(token.error == errc::ok);
        for (const auto& c : calls) {
            if (c.kind == call_kind::read)
                continue;
            FK_FUZZ_CHECK(c.kind == write->kind);
            FK_FUZZ_CHECK(c.token == token.value);
            if (c.kind == call_kind::floor_raise) {
                FK_FUZZ_CHECK(c.prefix == write->name);
                continue;
            }
            if (c.kind == call_kind::put || c.kind == call_kind::remove)
                FK_FUZZ_CHECK(c.key == write->name);
            if (c.kind == call_kind::advance) {
                // PUT /v1/fences/{lock} names its lock in the path; a Fencing-Lock header
                // there is not consulted.
                FK_FUZZ_CHECK(c.lock == write->name);
                continue;
            }
            const auto lock_fields = req.count("Fencing-Lock");
            if (lock_fields == 1)
                FK_FUZZ_CHECK(c.lock == std::string_view(req["Fencing-Lock"]));
            else // absent (twice is 400): the lock defaults to the key; operations need one
                FK_FUZZ_CHECK(lock_fields == 0 && c.kind != call_kind::operation &&
                              c.lock == write->name);
        }
    } else {
        FK_FUZZ_CHECK(applied == 0); // GET, HEAD and friends write nothing
    }

    // An injected store failure is never reported as success.
    if (injected && !calls.empty() && calls.front().result == *injected && *injected != errc::ok)
        FK_FUZZ_CHECK(res.result_int() >= 500);
}

net::io_context& io() {
    static net::io_context ctx;
    return ctx;
}

proxy::response run_handler(proxy::handler_context& ctx, proxy::request req) {
    std::optional<proxy::response> out;
    std::exception_ptr error;
    net::co_spawn(io(), proxy::handle_request(ctx, std::move(req)),
                  [&](std::exception_ptr e, proxy::response r) {
                      error = e;
                      out = std::move(r);
                  });
    io().restart();
    io().run();
    FK_FUZZ_CHECK(!error); // handle_request promises never to throw
    FK_FUZZ_CHECK(out.has_value());
    return std::move(*out);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // Rejected writes log at info; the fuzzer would spend its time formatting them.
    fk::logging::set_level(fk::logging::level::error);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0)
        return 0;
    static constexpr errc failures[] = {errc::ok, errc::unavailable, errc::outcome_unknown,
                                        errc::internal};
    const errc failure = failures[data[0] & 3u];
    const unsigned failing_request = (data[0] >> 2) & 7u;
    std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);

    const auto& settings = fuzz_settings();
    fk::test::memory_store memory;
    memory.add_operation(
        "touch",
        [](const st::operation_request& o) {
            st::operation_result r;
            r.token = o.token;
            r.rows_affected = 1;
            r.rows_json = "[{\"ok\":true}]";
            return r;
        },
        (data[0] & 0x40u) != 0 ? std::optional<std::size_t>{2} : std::nullopt);
    recording_store recorder(memory);
    proxy::handler_context ctx{recorder, settings, "fuzz", {}};

    // The session's own intake, short of the socket: feed() with its bounds, then
    // admit(), then the body, exactly as proxy/session.cpp does. Bit 5 of byte 0 turns
    // auth on (token "secret").
    const bool auth_on = (data[0] & 0x20u) != 0;
    const auto limit = settings.http.max_header_bytes;
    boost::beast::flat_buffer buffer;
    {
        auto dst = buffer.prepare(rest.size());
        net::buffer_copy(dst, net::buffer(rest.data(), rest.size()));
        buffer.commit(rest.size());
    }
    for (unsigned n = 0; n < 16 && buffer.size() > 0; ++n) {
        proxy::detail::request_parser parser;
        parser.header_limit(static_cast<std::uint32_t>(limit));
        parser.body_limit(boost::none);
        proxy::detail::feed_progress progress;
        auto ec =
            proxy::detail::feed(parser, buffer, proxy::detail::feed_phase::head, limit, progress);
        // All of the input is buffered: need_more means it ended mid-head.
        if (ec)
            return 0; // the session answers 431/400 and closes
        FK_FUZZ_CHECK(progress.head_bytes <= limit);
        const auto& head = parser.get();
        const auto target = proxy::match_route(head.method(), head.target());
        const bool body_follows = !parser.is_done();
        const bool authorized =
            !auth_on || (head.count(boost::beast::http::field::authorization) == 1 &&
                         head[boost::beast::http::field::authorization] == "Bearer secret");
        std::optional<std::uint64_t> content_length;
        if (auto declared = parser.content_length())
            content_length = *declared;
        const auto decision =
            proxy::admit({head, target, body_follows, authorized, content_length,
                          static_cast<std::uint64_t>(settings.http.max_body_bytes)});
        if (decision.refusal != errc::ok) {
            FK_FUZZ_CHECK(!decision.needs_permit);
            if (decision.close)
                return 0;
            continue; // answered without a body to skip; the next request follows
        }
        // Admitted: credentials held, or the route is open and has no body.
        FK_FUZZ_CHECK(authorized || (proxy::is_open_route(target.kind) && !body_follows));
        FK_FUZZ_CHECK(!proxy::framing_problem(head));
        if (body_follows) {
            parser.body_limit(static_cast<std::uint64_t>(settings.http.max_body_bytes));
            const auto head_fields = proxy::detail::field_count(parser.get());
            ec = proxy::detail::feed(parser, buffer, proxy::detail::feed_phase::body, limit,
                                     progress);
            if (ec)
                return 0; // 413, 431 or 400, then close (need_more: the input ended)
            if (proxy::detail::field_count(parser.get()) != head_fields)
                continue; // trailers: refused with 400, the connection goes on
        }
        FK_FUZZ_CHECK(parser.is_done());
        FK_FUZZ_CHECK(parser.get().body().size() <= settings.http.max_body_bytes);

        auto req = parser.release();
        const proxy::request copy = req; // the handler consumes the body
        const std::optional<errc> injected =
            failure != errc::ok && n == failing_request ? std::optional{failure} : std::nullopt;
        if (injected)
            memory.fail_next(*injected, 1);
        recorder.calls.clear();
        const auto res = run_handler(ctx, std::move(req));
        check_response(copy, res, recorder.calls, injected);
        check_read_body(copy, res, memory);
        if (injected)
            memory.fail_next(errc::ok, 0);
        if (!res.keep_alive())
            break;
    }
    return 0;
}
