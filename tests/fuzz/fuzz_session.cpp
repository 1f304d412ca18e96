// Fuzzes one connection end to end: raw bytes (request heads and bodies, Content-Length or
// chunked, Expect: 100-continue, pipelined) → the real session loop, basic_session
// (proxy/session.hpp, proxy/detail/session_impl.hpp: its intake, admit(), the in-flight
// permit, the 100 Continue, the trailer check, its own 4xx replies) → router → handlers →
// the transaction body parser (proxy/detail/txn_body.hpp) and the operation params parser
// (proxy/detail/operation_params.hpp) → an in-memory store that has two operations. The
// transport is Beast's in-memory test stream (tests/support/session_stream.hpp), run to
// completion on an io_context per input: the client writes the whole input and closes its
// sending side, so the session sees the end of its input and cannot wait for more; an
// input that still did not end would be libFuzzer's timeout (fuzz.sh: 10 s).
//
// The oracle is memory (issue 45: 8 MiB of "1," parameters once held 170 MB): every
// allocation goes through the counting operator new of tests/support/alloc_count.hpp, and
// the peak of the bytes live while the connection is served must stay within
//   max_body_bytes + max_growth × the input + per_connection + max_txn_ops × per_op.
// max_body_bytes: the one request in flight may hold a body of that size whatever it sent
// (Beast reserves a declared Content-Length before the bytes arrive: the documented bound,
// docs/operations.md "Memory", is max_body_bytes per request in flight). max_growth is 4:
// a parser may hold 3× its input (fuzz_txn_body's bound) and a chunked body's string
// twice its size; what the ops and parameters keep once the body is released, and the
// bodies the store keeps, are within that. per_connection is the session's own: its read
// buffer (16 KiB a read), the response head and the body of the one response being
// written. per_op is the ~250 bytes an op costs beyond its text (docs/operations.md).
// What the store keeps of its own (its copies of keys, bodies, records) is not counted:
// the in-memory store is a fake, and a real store's memory is bounded by its own design;
// a body or key the handler moves into it stays counted (it came from the input).
// The limits below (64 KiB bodies, 16 ops) let inputs of fuzz.sh's length (128 KiB) reach
// each of them.
//
// Also checked: the session ends (the input is finite), without an exception; every
// read and write it starts runs under a deadline (the transport notes it); never a crash
// or a sanitizer report.
//
// Input layout: byte 0 chooses the setup: bits 0-1 auth (off; the token "secret"; the
// scoped clients "writer" (writes and reads a/), "reader" (reads a/), "metrics" (only
// /metrics) and "admin", by their tokens of the same names), bit 2 the operation "two"
// declares its parameter count (2) (else unknown, as before its first prepare), bit 3
// the store has no operations, bits 4-5 how much one read delivers (everything, 1, 13
// or 509 bytes), bit 6 no in-flight permit is left (every request with a body is shed,
// 503). The rest is what the client sends.

#include "backends/log/logging.hpp"
#include "config/settings.hpp"
#include "proxy/auth.hpp"
#include "proxy/connection_registry.hpp"
#include "proxy/detail/session_impl.hpp"
#include "proxy/metrics.hpp"
#include "proxy/overload.hpp"
#include "proxy/scopes.hpp"
#include "proxy/session.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/support/alloc_count.hpp"
#include "tests/support/memory_store.hpp"
#include "tests/support/session_stream.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/fail_count.hpp>
#include <boost/beast/_experimental/test/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

template class fk::proxy::basic_session<fk::test::session_stream>;

namespace {

namespace st = fk::store;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace proxy = fk::proxy;
using fk::errc;
using fk::fuzz::uncounted;

// The session's limits: small, so that fuzz.sh's inputs (up to 128 KiB) reach each of them.
constexpr std::size_t max_header_bytes = 2048;
constexpr std::size_t max_body_bytes = 64 * 1024;
constexpr std::size_t max_txn_ops = 16;

// The bound (see the top of the file).
constexpr std::size_t max_growth = 4;
constexpr std::size_t per_connection = 64 * 1024;
constexpr std::size_t per_op = 256;

const fk::config::settings& fuzz_settings() {
    static const fk::config::settings s = [] {
        fk::config::settings v;
        v.http.max_header_bytes = max_header_bytes;
        v.http.max_body_bytes = max_body_bytes;
        v.http.max_txn_ops = max_txn_ops;
        v.http.max_txn_op_body_bytes = max_body_bytes / 2;
        v.operations["two"] = fk::config::operation{"select $1, $2"};
        v.operations["any"] = fk::config::operation{"select 1"};
        return v;
    }();
    return s;
}

// Runs one of the in-memory store's calls with what it allocates left out of the count:
// Asio's awaitables start when awaited, and the store's calls run to their end without
// suspending, so the scope covers exactly the store's own work.
template <class T> net::awaitable<T> quietly(net::awaitable<T> call) {
    const uncounted q;
    co_return co_await std::move(call);
}

class quiet_store final : public st::store {
public:
    explicit quiet_store(fk::test::memory_store& inner) : inner_(inner) {}

    using write = net::awaitable<st::write_result>;
    write put(st::put_request r) override { return quietly(inner_.put(std::move(r))); }
    write remove(st::delete_request r) override { return quietly(inner_.remove(std::move(r))); }
    net::awaitable<st::object_result> get(std::string key, bool with_body) override {
        return quietly(inner_.get(std::move(key), with_body));
    }
    write advance_fence(st::fence_request r) override {
        return quietly(inner_.advance_fence(std::move(r)));
    }
    net::awaitable<st::fence_result> read_fence(std::string lock) override {
        return quietly(inner_.read_fence(std::move(lock)));
    }
    net::awaitable<st::list_result> list_fences(st::list_request r) override {
        return quietly(inner_.list_fences(std::move(r)));
    }
    write raise_floor(st::floor_request r) override {
        return quietly(inner_.raise_floor(std::move(r)));
    }
    net::awaitable<st::floors_result> list_floors() override {
        return quietly(inner_.list_floors());
    }
    net::awaitable<st::txn_result> transact(st::txn_request r) override {
        return quietly(inner_.transact(std::move(r)));
    }
    net::awaitable<st::operation_result> run_operation(st::operation_request r) override {
        return quietly(inner_.run_operation(std::move(r)));
    }
    bool supports_operations() const noexcept override { return inner_.supports_operations(); }
    std::optional<std::size_t> operation_param_count(const std::string& name) const override {
        const uncounted q;
        return inner_.operation_param_count(name);
    }
    bool has_operation(const std::string& name) const override {
        const uncounted q;
        return inner_.has_operation(name);
    }
    bool ready() const noexcept override { return inner_.ready(); }
    void stop() override { inner_.stop(); }

private:
    fk::test::memory_store& inner_;
};

st::operation_result answer(const st::operation_request& o) {
    st::operation_result r;
    r.token = o.token;
    r.rows_affected = static_cast<std::int64_t>(o.params.size());
    r.rows_json = "[{\"ok\":true}]";
    return r;
}

std::vector<proxy::client_credentials> scoped_clients() {
    auto client = [](std::string name, std::vector<std::string> writes,
                     std::vector<std::string> reads, bool metrics, bool admin) {
        proxy::client_credentials c;
        c.token = name;
        c.scope = std::make_shared<const proxy::client_scope>(proxy::make_scope(
            std::move(name), std::move(writes), std::move(reads), metrics, admin));
        return c;
    };
    return {client("writer", {"a/"}, {}, false, false), client("reader", {}, {"a/"}, false, false),
            client("metrics", {}, {}, true, false), client("admin", {""}, {}, true, true)};
}

// Everything one connection needs, made before the count starts.
struct server {
    fk::test::memory_store memory;
    quiet_store store{memory};
    fk::proxy::metrics stats;
    fk::proxy::authenticator auth;
    fk::proxy::limiter connections{fk::proxy::limiter::unlimited};
    fk::proxy::limiter inflight;
    fk::proxy::inflight_keys idempotency_keys;
    std::shared_ptr<fk::proxy::connection_registry> registry =
        std::make_shared<fk::proxy::connection_registry>();

    explicit server(std::uint8_t mode) : inflight((mode & 0x40u) ? 0 : 1) {
        memory.set_clock([] { return std::int64_t{1'795'946'400'123}; });
        if (!(mode & 8u)) {
            memory.add_operation("two", answer,
                                 (mode & 4u) ? std::optional<std::size_t>{2} : std::nullopt);
            memory.add_operation("any", answer);
        }
        switch (mode & 3u) {
        case 1:
            auth.set_token(std::string{"secret"});
            break;
        case 2:
        case 3:
            auth.set_clients(scoped_clients());
            break;
        default:
            break;
        }
    }
    proxy::session_services services() {
        return {store, fuzz_settings(), stats, auth, connections, inflight, idempotency_keys};
    }
};

constexpr std::size_t read_sizes[] = {std::numeric_limits<std::size_t>::max(), 1, 13, 509};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // Refusals log at info; the fuzzer would spend its time formatting them.
    fk::logging::set_level(fk::logging::level::error);
    if (size == 0)
        return 0;
    using session_type = proxy::basic_session<fk::test::session_stream>;
    const std::uint8_t mode = data[0];
    const std::size_t input = size - 1;

    server srv{mode};
    beast::test::fail_count never{std::numeric_limits<std::size_t>::max()};
    net::io_context io;
    auto log = std::make_shared<fk::test::transport_log>();
    fk::test::session_stream wire{io, never, log};
    wire.read_size(read_sizes[(mode >> 4) & 3u]);
    beast::test::stream client{io};
    client.connect(wire);
    // All of the input is there at once; then the client stops sending (it still reads).
    net::write(client, net::buffer(data + 1, input));
    client.close();

    const std::size_t before = fk::fuzz::live_bytes();
    fk::fuzz::reset_peak();
    const std::size_t bound =
        max_body_bytes + max_growth * input + per_connection + max_txn_ops * per_op;

    bool finished = false;
    std::exception_ptr failure;
    {
        auto s = std::make_shared<session_type>(std::move(wire), srv.services(), srv.registry,
                                                proxy::limiter::permit{});
        net::co_spawn(
            io, [s]() -> net::awaitable<void> { co_await s->run(); },
            [&](std::exception_ptr e) {
                finished = true;
                failure = e;
            });
    }
    // One handler at a time; what the session wrote is dropped after each, as a client
    // reading its responses would, so that the count holds the one response being sent.
    while (!finished && io.run_one() > 0)
        client.clear();

    fk::fuzz::report("session", input, before, bound);
    FK_FUZZ_CHECK(finished);                // nothing left to run, yet the session did not end
    FK_FUZZ_CHECK(!failure);                // run() lets no exception out
    FK_FUZZ_CHECK(log->unguarded_ops == 0); // every read and write under a deadline
    FK_FUZZ_CHECK(fk::fuzz::peak_bytes() - before <= bound);
    return 0;
}
