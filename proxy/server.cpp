#include "proxy/server.hpp"

#include "backends/log/logging.hpp"
#include "proxy/connection_registry.hpp"
#include "proxy/detail/endpoint.hpp"
#include "proxy/session.hpp"
#include "proxy/tls_session.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <exception>

namespace fk::proxy {

namespace {

using net::ip::tcp;
constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

// After an accept error other than "acceptor closed" (EMFILE, ENFILE, ENOBUFS...), wait
// this long before accepting again instead of spinning.
constexpr std::chrono::milliseconds accept_backoff{100};

void log_exception(std::string_view what, std::exception_ptr e, std::string_view peer = {}) {
    if (!e)
        return;
    std::string text = "unknown exception";
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& ex) {
        text = ex.what();
    } catch (...) {
    }
    nlohmann::json fields{{"exception", text}};
    if (!peer.empty())
        fields["peer"] = peer;
    logging::write(logging::level::error, what, fields);
}

} // namespace

server::server(net::io_context& io, const session_services& services,
               std::vector<net::io_context*> session_contexts, const tls_credentials* tls)
    : io_(io), session_contexts_(std::move(session_contexts)), services_(services),
      settings_(services.settings), tls_(tls), acceptor_(net::make_strand(io)),
      signals_(io, SIGINT, SIGTERM), deadline_(net::make_strand(io)),
      registry_(std::make_shared<connection_registry>()) {}

server::~server() {
    // Sessions still queued in the io_context may outlive the server.
    registry_->forget_on_empty();
}

std::optional<std::string> server::listen() {
    const std::string where = settings_.listen_host + ":" + std::to_string(settings_.listen_port);
    beast::error_code ec;
    tcp::endpoint endpoint;
    auto address = net::ip::make_address(settings_.listen_host, ec);
    if (!ec) {
        endpoint = {address, settings_.listen_port};
    } else {
        // A host name: resolved once, at start (blocking is fine before run()).
        tcp::resolver resolver{io_};
        auto results =
            resolver.resolve(settings_.listen_host, std::to_string(settings_.listen_port),
                             tcp::resolver::passive, ec);
        if (ec || results.empty())
            return "cannot resolve listen host '" + settings_.listen_host +
                   "': " + (ec ? ec.message() : std::string{"no address"});
        endpoint = results.begin()->endpoint();
    }

    acceptor_.open(endpoint.protocol(), ec);
    if (!ec)
        acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec)
        acceptor_.bind(endpoint, ec);
    if (!ec)
        acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec)
        return "cannot listen on " + where + ": " + ec.message();
    return std::nullopt;
}

std::string server::local_address() const {
    beast::error_code ec;
    auto ep = acceptor_.local_endpoint(ec);
    return ec ? std::string{} : detail::format_endpoint(ep);
}

std::size_t server::open_connections() const {
    return registry_->size();
}

void server::start() {
    net::co_spawn(acceptor_.get_executor(), accept_loop(),
                  [](std::exception_ptr e) { log_exception("accept loop failed", e); });
    watch_signals();
}

void server::watch_signals() {
    signals_.async_wait([this](const beast::error_code& ec, int signo) {
        if (ec)
            return; // cancelled: the server is going away
        if (!shutting_down_) {
            logging::write(logging::level::info, "signal received: draining",
                           {{"signal", signo},
                            {"open_connections", registry_->size()},
                            {"deadline_ms", settings_.shutdown_timeout.count()}});
            shutdown();
            watch_signals();
            return;
        }
        // A second signal: stop waiting for the stragglers.
        logging::write(logging::level::warn, "second signal: closing every connection now",
                       {{"signal", signo}});
        registry_->close_all();
        drained();
    });
}

void server::shutdown() {
    if (shutting_down_.exchange(true))
        return;
    net::post(acceptor_.get_executor(), [this] {
        beast::error_code ec;
        acceptor_.close(ec);
    });
    net::post(deadline_.get_executor(), [this] {
        deadline_.expires_after(settings_.shutdown_timeout);
        deadline_.async_wait([this](const beast::error_code& ec) {
            if (ec)
                return;
            auto left = registry_->size();
            if (left > 0)
                logging::write(logging::level::warn, "drain deadline passed: closing connections",
                               {{"open_connections", left}});
            registry_->close_all();
            drained();
        });
    });
    registry_->begin_drain([this] { drained(); });
}

void server::drained() {
    if (drained_flag_.exchange(true))
        return;
    net::post(deadline_.get_executor(), [this] { deadline_.cancel(); });
    drained_.set_value();
}

void server::wait_drained() {
    drained_.get_future().wait();
}

net::any_io_executor server::next_session_executor() {
    if (session_contexts_.empty())
        return net::make_strand(io_);
    auto* context = session_contexts_[next_context_++ % session_contexts_.size()];
    return context->get_executor();
}

net::awaitable<void> server::accept_loop() {
    for (;;) {
        auto [ec, socket] = co_await acceptor_.async_accept(next_session_executor(), use_tuple);
        if (ec) {
            if (ec == net::error::operation_aborted || !acceptor_.is_open())
                co_return;
            logging::write(logging::level::error, "accept failed", {{"error", ec.message()}});
            net::steady_timer backoff{acceptor_.get_executor(), accept_backoff};
            co_await backoff.async_wait(use_tuple);
            continue;
        }
        auto permit = services_.connections.try_acquire();
        if (!permit) {
            services_.stats.count_connection_rejected();
            if (logging::enabled(logging::level::debug))
                logging::write(logging::level::debug, "connection refused: max_connections reached",
                               {{"limit", services_.connections.limit()}});
            beast::error_code ignored;
            socket.shutdown(tcp::socket::shutdown_both, ignored);
            socket.close(ignored);
            continue;
        }
        beast::error_code nodelay_ec;
        socket.set_option(tcp::no_delay(true), nodelay_ec);
        if (tls_)
            spawn(std::make_shared<tls_session>(std::move(socket), tls_->current(), services_,
                                                registry_, std::move(permit)));
        else
            spawn(std::make_shared<session>(std::move(socket), services_, registry_,
                                            std::move(permit)));
    }
}

template <class Session> void server::spawn(std::shared_ptr<Session> s) {
    auto executor = s->executor();
    net::co_spawn(
        executor, [s]() -> net::awaitable<void> { co_await s->run(); },
        [peer = s->peer()](std::exception_ptr e) {
            // A failing session ends only its own connection.
            log_exception("connection failed", e, peer);
        });
}

} // namespace fk::proxy
