#pragma once
// One libpq connection driven on the io_context (STYLE.md "libpq on the io_context"):
// non-blocking connect with our own deadline, PQsendQueryPrepared / pipelines, flush and
// read loops on a posix::stream_descriptor, a deadline per exchange. No thread ever
// blocks on the database.
//
// Every member except the constructor, strand() and endpoint() must run on strand(); the
// pool guarantees that only one request uses a connection at a time.

#include "backends/net.hpp"
#include "backends/postgres/result.hpp"
#include "backends/postgres/sql.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

struct pg_conn; // libpq's PGconn, kept out of headers

namespace fk::store::pg::detail {

using millis = std::chrono::milliseconds;

struct pg_conn_closer {
    void operator()(pg_conn* c) const noexcept;
};

// One statement of a pipeline: a prepared statement and its parameters: `params`, or
// an operation's own parameters, sent from where the request holds them (`text`, when
// set; no copy of them is made).
struct pipeline_step {
    const char* statement;
    const sql::param_list* params;
    const fk::store::text_params* text = nullptr;
};

class connection : public std::enable_shared_from_this<connection> {
public:
    using strand_type = net::strand<net::io_context::executor_type>;

    explicit connection(net::io_context& io);
    ~connection();
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    const strand_type& strand() const noexcept { return strand_; }

    // Connects to `conninfo` (a libpq URI or key=value string; PG* variables apply) within
    // `timeout`. Returns an empty string on success, else the reason (no credentials).
    // A server that says it is read-only (in_hot_standby or default_transaction_read_only
    // on, reported by Postgres 14+) is refused: fencekeeper writes, and a multi-host URI
    // with target_session_attrs=read-write makes libpq skip such servers itself.
    net::awaitable<std::string> connect(std::string conninfo, millis timeout);

    // One statement in the simple query protocol (may hold several statements).
    net::awaitable<exec_outcome> exec_simple(const std::string& text, millis timeout);
    net::awaitable<exec_outcome> prepare(const char* name, const std::string& text, millis timeout);
    // Describes a prepared statement; the result's cmd_tuples holds its parameter count.
    net::awaitable<exec_outcome> describe(const char* name, millis timeout);
    // One prepared statement; binary_results for the GET statements (bytea body).
    net::awaitable<exec_outcome> exec_prepared(const char* name, const sql::param_list& params,
                                               bool binary_results, millis timeout);
    // Several prepared statements in pipeline mode, one Sync at the end: they run in one
    // implicit transaction, and an error in any of them rolls back all of them.
    net::awaitable<exec_outcome> exec_pipeline(const std::vector<pipeline_step>& steps,
                                               millis timeout);

    // Fit to go back to the pool: CONNECTION_OK, PQTRANS_IDLE, and no exchange was cut
    // short (a timed-out or cancelled query leaves the session in an unknown state). A
    // connection whose server turned out read-only (SQLSTATE 25006, or the server reported
    // default_transaction_read_only = on) is never reusable.
    bool reusable() const noexcept;
    // For an idle connection about to be used: reads whatever the server sent meanwhile
    // (a FATAL from pg_terminate_backend or a shutdown, EOF) without blocking; false when
    // the connection is dead or the server is ending the session.
    bool check_idle() noexcept;
    // Aborts any wait in progress and marks the connection broken (stop()).
    void abort() noexcept;

    // "host:port/db" for logs; never the password.
    const std::string& endpoint() const noexcept { return endpoint_; }
    // "address:port" of the server this connection reached (the host libpq picked from a
    // multi-host URI): which server a round trip was measured on.
    const std::string& server() const noexcept { return server_; }

    // Per connection: which user operations are prepared here (by index).
    std::vector<bool> op_prepared;

private:
    enum class wait_kind { read, write, read_or_write };
    // Waits on the socket; false on timeout, abort or error.
    net::awaitable<bool> wait(wait_kind k);
    // Re-binds the descriptor to PQsocket() (it may change during connect).
    void rebind_socket();
    void release_socket() noexcept;
    void arm_deadline(millis timeout);
    void disarm_deadline() noexcept;
    // Sends what libpq queued, then collects results up to the end of the exchange.
    net::awaitable<exec_outcome> finish_exchange(bool pipeline);
    exec_outcome unsent_failure();
    // After an exchange: a read-only answer marks the connection broken (logged once).
    void check_read_only(const exec_outcome& out) noexcept;

    strand_type strand_;
    net::posix::stream_descriptor socket_;
    net::steady_timer deadline_;
    std::unique_ptr<pg_conn, pg_conn_closer> conn_;
    int bound_fd_ = -1;
    bool timed_out_ = false;
    bool broken_ = false;
    bool read_only_ = false;
    std::uint64_t generation_ = 0; // identifies the exchange a deadline belongs to
    std::string endpoint_;
    std::string server_;
};

} // namespace fk::store::pg::detail
