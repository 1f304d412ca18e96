// Longer than 400 lines because it is one libpq connection's whole state machine
// (connect, send, flush, read, deadline, abort), each step depending on the others'
// invariants about the socket and the exchange in progress.
#include "backends/postgres/detail/connection.hpp"

#include "backends/log/logging.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <libpq-fe.h>

#include <nlohmann/json.hpp>

#include <cstring>

namespace fk::store::pg::detail {
namespace {

using transport = exec_outcome::transport;

result_table to_table(const PGresult* res) {
    result_table t;
    switch (PQresultStatus(res)) {
    case PGRES_COMMAND_OK:
        t.st = result_table::status::command_ok;
        break;
    case PGRES_TUPLES_OK:
        t.st = result_table::status::tuples_ok;
        break;
    case PGRES_FATAL_ERROR:
    case PGRES_NONFATAL_ERROR:
    case PGRES_BAD_RESPONSE:
        t.st = result_table::status::error;
        break;
    case PGRES_PIPELINE_ABORTED:
        t.st = result_table::status::pipeline_aborted;
        break;
    case PGRES_PIPELINE_SYNC:
        t.st = result_table::status::pipeline_sync;
        break;
    default:
        t.st = result_table::status::other;
    }
    if (t.st == result_table::status::error) {
        // libpq leaves SQLSTATE empty for the errors it makes up itself (connection
        // lost): only a server-sent SQLSTATE proves the statement did not commit.
        if (const char* s = PQresultErrorField(res, PG_DIAG_SQLSTATE))
            t.sqlstate = s;
        if (const char* m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY))
            t.message = m;
        else if (const char* full = PQresultErrorMessage(res))
            t.message = full;
        if (const char* d = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL))
            t.detail = d;
        if (const char* h = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT))
            t.hint = h;
        while (!t.message.empty() && (t.message.back() == '\n' || t.message.back() == ' '))
            t.message.pop_back();
        return t;
    }
    t.cmd_tuples = PQcmdTuples(const_cast<PGresult*>(res));
    const int nfields = PQnfields(res);
    t.binary = nfields > 0 && PQfformat(res, 0) == 1;
    t.columns.reserve(static_cast<std::size_t>(nfields));
    for (int f = 0; f < nfields; ++f)
        t.columns.push_back({PQfname(res, f), static_cast<unsigned>(PQftype(res, f))});
    const int ntuples = PQntuples(res);
    t.rows.resize(static_cast<std::size_t>(ntuples));
    for (int r = 0; r < ntuples; ++r) {
        auto& row = t.rows[static_cast<std::size_t>(r)];
        row.reserve(static_cast<std::size_t>(nfields));
        for (int f = 0; f < nfields; ++f) {
            if (PQgetisnull(res, r, f))
                row.emplace_back(std::nullopt);
            else
                row.emplace_back(std::string(PQgetvalue(res, r, f),
                                             static_cast<std::size_t>(PQgetlength(res, r, f))));
        }
    }
    return t;
}

struct result_clear {
    void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using result_ptr = std::unique_ptr<PGresult, result_clear>;

// Server notices would otherwise be printed on stderr by libpq, between our JSON log
// lines. An error the server sends while the session is idle arrives here too: a FATAL or
// PANIC one (pg_terminate_backend, shutdown) means the server is ending the session, so
// the connection is marked broken. `broken` points to the connection's broken_ flag.
void on_notice(void* broken, const PGresult* r) {
    const char* severity = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (severity && (std::strcmp(severity, "FATAL") == 0 || std::strcmp(severity, "PANIC") == 0))
        *static_cast<bool*>(broken) = true;
}

bool status_on(PGconn* c, const char* parameter) {
    const char* v = PQparameterStatus(c, parameter);
    return v && std::strcmp(v, "on") == 0;
}

// Why the server this session reached takes no writes, or nullptr. Postgres 14+ reports
// both parameters at connect and whenever they change; older servers report neither, and
// their first write answers 25006 instead.
const char* read_only_reason(PGconn* c) {
    if (status_on(c, "in_hot_standby"))
        return "the server is a hot standby (in_hot_standby = on)";
    if (status_on(c, "default_transaction_read_only"))
        return "the server is read-only (default_transaction_read_only = on)";
    return nullptr;
}

std::string last_error(PGconn* c) {
    std::string m = c ? PQerrorMessage(c) : "out of memory";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' '))
        m.pop_back();
    return m;
}

} // namespace

void pg_conn_closer::operator()(pg_conn* c) const noexcept {
    PQfinish(c);
}

connection::connection(net::io_context& io)
    : strand_(net::make_strand(io)), socket_(strand_), deadline_(strand_) {}

connection::~connection() {
    // The descriptor must let go of the fd before PQfinish closes it, or a reused fd
    // number would deliver this socket's stale registration to someone else.
    release_socket();
}

void connection::release_socket() noexcept {
    if (socket_.is_open()) {
        boost::system::error_code ec;
        socket_.cancel(ec);
        socket_.release();
    }
    bound_fd_ = -1;
}

void connection::rebind_socket() {
    // Always re-register: during connect libpq may close the socket and open another one
    // that gets the same number, which epoll would not know about.
    release_socket();
    const int fd = PQsocket(conn_.get());
    if (fd < 0)
        return;
    boost::system::error_code ec;
    socket_.assign(fd, ec);
    if (!ec)
        bound_fd_ = fd;
}

void connection::arm_deadline(millis timeout) {
    timed_out_ = false;
    const auto gen = ++generation_;
    deadline_.expires_after(timeout);
    deadline_.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
        if (ec || gen != self->generation_)
            return;
        self->timed_out_ = true;
        boost::system::error_code ignored;
        self->socket_.cancel(ignored);
    });
}

void connection::disarm_deadline() noexcept {
    ++generation_;
    deadline_.cancel();
}

void connection::abort() noexcept {
    broken_ = true;
    ++generation_;
    deadline_.cancel();
    boost::system::error_code ignored;
    if (socket_.is_open())
        socket_.cancel(ignored);
}

net::awaitable<bool> connection::wait(wait_kind k) {
    using namespace boost::asio::experimental::awaitable_operators;
    using net::posix::descriptor_base;
    if (timed_out_ || broken_ || bound_fd_ < 0)
        co_return false;
    boost::system::error_code ec;
    if (k == wait_kind::read) {
        co_await socket_.async_wait(descriptor_base::wait_read,
                                    net::redirect_error(net::use_awaitable, ec));
    } else if (k == wait_kind::write) {
        co_await socket_.async_wait(descriptor_base::wait_write,
                                    net::redirect_error(net::use_awaitable, ec));
    } else {
        // While our request is still going out the server may already be answering;
        // waiting for writability alone could then stall both sides.
        boost::system::error_code ec_read, ec_write;
        auto r = co_await (socket_.async_wait(descriptor_base::wait_read,
                                              net::redirect_error(net::use_awaitable, ec_read)) ||
                           socket_.async_wait(descriptor_base::wait_write,
                                              net::redirect_error(net::use_awaitable, ec_write)));
        ec = r.index() == 0 ? ec_read : ec_write;
    }
    co_return !ec && !timed_out_ && !broken_;
}

net::awaitable<std::string> connection::connect(std::string conninfo, millis timeout) {
    // conninfo is expanded (expand_dbname = 1); later keywords override it. PG*
    // environment variables fill in what the URI leaves out.
    const char* const keywords[] = {"dbname", "fallback_application_name", "client_encoding",
                                    nullptr};
    const char* const values[] = {conninfo.c_str(), "fencekeeper", "UTF8", nullptr};
    conn_.reset(PQconnectStartParams(keywords, values, 1));
    PGconn* c = conn_.get();
    if (!c)
        co_return "out of memory";
    if (PQstatus(c) == CONNECTION_BAD)
        co_return last_error(c);
    PQsetNoticeReceiver(c, on_notice, &broken_);
    arm_deadline(timeout);
    // libpq's connect_timeout does nothing in non-blocking mode: the deadline is ours.
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    std::string error;
    for (;;) {
        if (st == PGRES_POLLING_OK)
            break;
        if (st == PGRES_POLLING_FAILED) {
            error = last_error(c);
            break;
        }
        rebind_socket();
        if (!co_await wait(st == PGRES_POLLING_READING ? wait_kind::read : wait_kind::write)) {
            error = timed_out_
                        ? "connect timed out after " + std::to_string(timeout.count()) + " ms"
                        : "connect aborted";
            break;
        }
        st = PQconnectPoll(c);
    }
    disarm_deadline();
    if (const char* h = PQhost(c))
        endpoint_ = h;
    if (const char* p = PQport(c))
        endpoint_ += std::string(":") + p;
    if (const char* d = PQdb(c))
        endpoint_ += std::string("/") + d;
    const char* addr = PQhostaddr(c);
    server_ = addr && *addr ? addr : (PQhost(c) ? PQhost(c) : "");
    if (const char* p = PQport(c))
        server_ += std::string(":") + p;
    if (error.empty())
        if (const char* why = read_only_reason(c)) {
            read_only_ = true;
            error = std::string(why) +
                    "; fencekeeper needs the primary: list every server in the URI with "
                    "target_session_attrs=read-write";
        }
    if (!error.empty()) {
        broken_ = true;
        co_return error;
    }
    rebind_socket();
    if (PQsetnonblocking(c, 1) != 0) {
        broken_ = true;
        co_return last_error(c);
    }
    co_return std::string();
}

exec_outcome connection::unsent_failure() {
    exec_outcome o;
    o.t = transport::failed_unsent;
    o.error = last_error(conn_.get());
    broken_ = true;
    return o;
}

net::awaitable<exec_outcome> connection::finish_exchange(bool pipeline) {
    PGconn* c = conn_.get();
    exec_outcome out;
    for (;;) {
        const int r = PQflush(c);
        if (r == 0)
            break;
        if (r < 0) {
            out = unsent_failure();
            co_return out;
        }
        if (!co_await wait(wait_kind::read_or_write) || PQconsumeInput(c) == 0) {
            const bool timed_out = timed_out_;
            out = unsent_failure();
            if (timed_out)
                out.t = transport::timeout_unsent;
            co_return out;
        }
    }
    // From here on the whole request, Sync included, has left us: a write may commit.
    int nulls_in_a_row = 0;
    for (;;) {
        while (PQisBusy(c)) {
            if (!co_await wait(wait_kind::read)) {
                out.t = timed_out_ ? transport::timeout_after_send : transport::failed_after_send;
                out.error = timed_out_ ? "timed out" : "aborted";
                broken_ = true;
                co_return out;
            }
            if (PQconsumeInput(c) == 0) {
                out.t = transport::failed_after_send;
                out.error = last_error(c);
                broken_ = true;
                co_return out;
            }
        }
        result_ptr res(PQgetResult(c));
        if (!res) {
            if (!pipeline)
                break;
            // In a pipeline a NULL ends each statement's results; two in a row would mean
            // nothing more is coming (the connection broke).
            if (++nulls_in_a_row > 1 || PQstatus(c) == CONNECTION_BAD) {
                out.t = transport::failed_after_send;
                out.error = last_error(c);
                broken_ = true;
                co_return out;
            }
            continue;
        }
        nulls_in_a_row = 0;
        out.results.push_back(to_table(res.get()));
        if (pipeline && out.results.back().st == result_table::status::pipeline_sync)
            break;
        if (PQstatus(c) == CONNECTION_BAD)
            break;
    }
    if (PQstatus(c) == CONNECTION_BAD) {
        out.t = transport::failed_after_send;
        out.error = last_error(c);
        broken_ = true;
    }
    check_read_only(out);
    co_return out;
}

void connection::check_read_only(const exec_outcome& out) noexcept {
    if (read_only_)
        return;
    const char* why = nullptr;
    for (const auto& r : out.results)
        if (r.sqlstate == "25006")
            why = "the server refused a write: read-only transaction (SQLSTATE 25006)";
    if (!why)
        why = read_only_reason(conn_.get());
    if (!why)
        return;
    // Never reused: the server is a standby or was made read-only (a failover in
    // progress, or an orchestrator fencing it). The request's own answer is 503 (a
    // server error: nothing was applied); the pool connects anew, and with
    // target_session_attrs=read-write libpq finds the primary.
    read_only_ = true;
    broken_ = true;
    try {
        logging::write(logging::level::warn, "postgres server is read-only; connection dropped",
                       {{"endpoint", endpoint_}, {"server", server_}, {"reason", why}});
    } catch (...) {
    }
}

net::awaitable<exec_outcome> connection::exec_simple(const std::string& text, millis timeout) {
    if (broken_ || !conn_ || PQsendQuery(conn_.get(), text.c_str()) == 0)
        co_return unsent_failure();
    arm_deadline(timeout);
    auto out = co_await finish_exchange(false);
    disarm_deadline();
    co_return out;
}

net::awaitable<exec_outcome> connection::prepare(const char* name, const std::string& text,
                                                 millis timeout) {
    if (broken_ || !conn_ || PQsendPrepare(conn_.get(), name, text.c_str(), 0, nullptr) == 0)
        co_return unsent_failure();
    arm_deadline(timeout);
    auto out = co_await finish_exchange(false);
    disarm_deadline();
    co_return out;
}

net::awaitable<exec_outcome> connection::describe(const char* name, millis timeout) {
    if (broken_ || !conn_ || PQsendDescribePrepared(conn_.get(), name) == 0)
        co_return unsent_failure();
    arm_deadline(timeout);
    // The parameter count is only in the PGresult; keep it before it is detached.
    PGconn* c = conn_.get();
    exec_outcome out;
    for (;;) {
        const int r = PQflush(c);
        if (r == 0)
            break;
        if (r < 0 || !co_await wait(wait_kind::read_or_write) || PQconsumeInput(c) == 0) {
            disarm_deadline();
            co_return unsent_failure();
        }
    }
    for (;;) {
        while (PQisBusy(c)) {
            if (!co_await wait(wait_kind::read) || PQconsumeInput(c) == 0) {
                disarm_deadline();
                out.t = transport::failed_after_send;
                out.error = last_error(c);
                broken_ = true;
                co_return out;
            }
        }
        result_ptr res(PQgetResult(c));
        if (!res)
            break;
        auto t = to_table(res.get());
        if (t.ok())
            t.cmd_tuples = std::to_string(PQnparams(res.get()));
        out.results.push_back(std::move(t));
    }
    disarm_deadline();
    if (PQstatus(c) == CONNECTION_BAD) {
        out.t = transport::failed_after_send;
        broken_ = true;
    }
    co_return out;
}

net::awaitable<exec_outcome> connection::exec_prepared(const char* name,
                                                       const sql::param_list& params,
                                                       bool binary_results, millis timeout) {
    if (broken_ || !conn_)
        co_return unsent_failure();
    sql::param_arrays a(params);
    arm_deadline(timeout);
    if (PQsendQueryPrepared(conn_.get(), name, a.size(), a.values.data(), a.lengths.data(),
                            a.formats.data(), binary_results ? 1 : 0) == 0) {
        disarm_deadline();
        co_return unsent_failure();
    }
    auto out = co_await finish_exchange(false);
    disarm_deadline();
    co_return out;
}

net::awaitable<exec_outcome> connection::exec_pipeline(const std::vector<pipeline_step>& steps,
                                                       millis timeout) {
    PGconn* c = conn_.get();
    if (broken_ || !c || PQenterPipelineMode(c) == 0)
        co_return unsent_failure();
    arm_deadline(timeout);
    for (const auto& step : steps) {
        const auto a = step.text ? sql::param_arrays(*step.text) : sql::param_arrays(*step.params);
        if (PQsendQueryPrepared(c, step.statement, a.size(), a.values.data(), a.lengths.data(),
                                a.formats.data(), 0) == 0) {
            disarm_deadline();
            co_return unsent_failure();
        }
    }
    if (PQpipelineSync(c) == 0) {
        disarm_deadline();
        co_return unsent_failure();
    }
    auto out = co_await finish_exchange(true);
    disarm_deadline();
    if (out.t == transport::ok && PQexitPipelineMode(c) == 0)
        broken_ = true;
    co_return out;
}

bool connection::reusable() const noexcept {
    PGconn* c = conn_.get();
    return c && !broken_ && !read_only_ && !timed_out_ && PQstatus(c) == CONNECTION_OK &&
           PQtransactionStatus(c) == PQTRANS_IDLE && PQpipelineStatus(c) == PQ_PIPELINE_OFF &&
           !PQisBusy(c);
}

bool connection::check_idle() noexcept {
    PGconn* c = conn_.get();
    if (!c || broken_)
        return false;
    // Reads what arrived and parses it: PQisBusy hands a FATAL sent to the idle session to
    // on_notice, which marks the connection broken (the server closes it right after, but
    // the end of the stream may not have arrived yet).
    const bool read = PQconsumeInput(c) != 0;
    if (read)
        static_cast<void>(PQisBusy(c));
    if (!read || broken_ || PQstatus(c) != CONNECTION_OK) {
        broken_ = true;
        return false;
    }
    return true;
}

} // namespace fk::store::pg::detail
