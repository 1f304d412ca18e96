// fencekeeper: parse the command line, open the store, serve HTTP until SIGTERM/SIGINT,
// drain, stop the store, exit 0 (docs/operations.md, "Lifecycle and signals"). SIGHUP re-reads the
// auth token, the log level and the TLS certificate; --check-config validates and exits.

#include "backends/log/logging.hpp"
#include "backends/make_store.hpp"
#include "config/parse.hpp"
#include "config/settings.hpp"
#include "proxy/auth.hpp"
#include "proxy/detail/store_url.hpp"
#include "proxy/handlers.hpp"
#include "proxy/metrics.hpp"
#include "proxy/overload.hpp"
#include "proxy/preflight.hpp"
#include "proxy/reload.hpp"
#include "proxy/server.hpp"
#include "proxy/tls.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#ifndef FK_VERSION
#define FK_VERSION "0.1.0" // set from project(VERSION) by CMakeLists.txt
#endif

namespace {

namespace net = boost::asio;
using namespace fk;

// An io_context whose pending handlers (suspended coroutines included) can be destroyed
// explicitly, while the store and the server they point into still exist.
class io_context : public net::io_context {
public:
    using net::io_context::io_context;
    void destroy_pending_work() { shutdown(); }
};

// SIGHUP handling on a thread of its own: a reload reads files, and blocking file I/O
// never runs on the I/O threads.
class reload_thread {
public:
    reload_thread(std::vector<std::string> args, proxy::authenticator& auth,
                  proxy::tls_credentials* tls)
        : args_(std::move(args)), auth_(auth), tls_(tls), work_(net::make_work_guard(io_)),
          hup_(io_, SIGHUP) {
        wait();
        thread_ = std::thread([this] { io_.run(); });
    }
    ~reload_thread() {
        io_.stop();
        thread_.join();
    }
    reload_thread(const reload_thread&) = delete;
    reload_thread& operator=(const reload_thread&) = delete;

private:
    void wait() {
        hup_.async_wait([this](const boost::system::error_code& ec, int) {
            if (ec)
                return;
            logging::write(logging::level::info,
                           tls_ ? "SIGHUP: reloading auth token, log level and TLS certificate"
                                : "SIGHUP: reloading auth token and log level");
            proxy::reload_settings(args_, auth_, tls_);
            wait();
        });
    }

    std::vector<std::string> args_;
    proxy::authenticator& auth_;
    proxy::tls_credentials* tls_;
    net::io_context io_;
    net::executor_work_guard<net::io_context::executor_type> work_;
    net::signal_set hup_;
    std::thread thread_;
};

int serve(const std::vector<std::string>& args, const config::settings& settings) {
    logging::set_level(settings.log_level);
    logging::start_writer(); // log lines leave the I/O threads from here on
    auto checked = proxy::preflight(settings);
    if (!checked.ok()) {
        std::cerr << "fencekeeper: " << checked.error << "\n";
        return 2;
    }
    proxy::authenticator auth{checked.token};
    const std::size_t scoped_clients = checked.clients.size();
    if (scoped_clients > 0)
        auth.set_clients(std::move(checked.clients));
    std::optional<proxy::tls_credentials> tls;
    if (checked.tls)
        tls.emplace(std::move(checked.tls));
    // SIGHUP is watched before anything else can go wrong, so that a reload sent while we
    // start never kills the process (its default action).
    reload_thread reloader{args, auth, tls ? &*tls : nullptr};
    if (checked.tls_expired) {
        std::cerr << "fencekeeper: WARNING: the TLS certificate expired on "
                  << checked.tls_not_after << "; clients will refuse it" << std::endl;
        logging::write(logging::level::warn, "the TLS certificate has expired",
                       {{"serial", checked.tls_serial}, {"not_after", checked.tls_not_after}});
    }

    if (auto warning = proxy::exposure_warning(settings, auth.enabled())) {
        std::cerr << "fencekeeper: " << *warning << std::endl;
        logging::write(logging::level::warn, "listening on a non-loopback address without auth",
                       {{"listen", settings.listen_host}});
    }

    // One io_context per I/O thread, each run by exactly that thread (concurrency hint 1):
    // `io` also holds the acceptor, the signals and the store; connections are spread over
    // all of them (proxy/server.hpp).
    const int threads = config::effective_threads(settings);
    io_context io{1};
    std::vector<std::unique_ptr<io_context>> workers;
    std::vector<net::executor_work_guard<net::io_context::executor_type>> worker_guards;
    std::vector<net::io_context*> session_contexts{&io};
    for (int i = 1; i < threads; ++i) {
        workers.push_back(std::make_unique<io_context>(1));
        worker_guards.push_back(net::make_work_guard(*workers.back()));
        session_contexts.push_back(workers.back().get());
    }

    auto opened = store::make_store(io, settings);
    if (auto* failure = std::get_if<store::open_error>(&opened)) {
        std::cerr << "fencekeeper: " << failure->message << "\n";
        return failure->exit_code;
    }
    auto store = std::move(std::get<std::unique_ptr<store::store>>(opened));

    proxy::metrics stats{FK_VERSION};
    stats.set_store_ready_probe([s = store.get()] { return s->ready(); });
    stats.set_batch_stats(store->batches());
    stats.set_file_health(store->file_health());
    proxy::limiter connections{settings.http.max_connections};
    proxy::limiter inflight{settings.http.max_inflight_requests};
    proxy::inflight_keys idempotency_keys;
    const proxy::session_services services{*store,      settings, stats,           auth,
                                           connections, inflight, idempotency_keys};

    proxy::server server{io, services, session_contexts, tls ? &*tls : nullptr};
    if (auto error = server.listen()) {
        std::cerr << "fencekeeper: " << *error << "\n";
        store->stop();
        return 1;
    }
    server.start();
    auto address = server.local_address();
    std::cout << "listening on " << address << std::endl; // flushed: scripts wait for it
    nlohmann::json fields{{"address", address},
                          {"threads", threads},
                          {"store", proxy::detail::redact_store_url(settings.store)},
                          {"auth", auth.enabled()},
                          {"auth_clients", scoped_clients},
                          {"tls", settings.tls.enabled()},
                          {"version", FK_VERSION}};
    if (settings.tls.enabled()) {
        fields["mtls"] = settings.tls.client_ca_file.has_value();
        fields["tls_serial"] = checked.tls_serial;
        fields["tls_not_after"] = checked.tls_not_after;
    }
    logging::write(logging::level::info, "listening", fields);

    std::vector<std::thread> pool;
    pool.reserve(session_contexts.size());
    for (auto* context : session_contexts)
        pool.emplace_back([context] {
            for (;;) {
                try {
                    context->run();
                    return;
                } catch (const std::exception& e) {
                    // Handlers report errors as values; this is a bug, not a reason to die.
                    logging::write(logging::level::error, "exception escaped a handler",
                                   {{"exception", e.what()}});
                }
            }
        });

    server.wait_drained();
    logging::write(logging::level::info, "drained: stopping the store");
    store->stop();
    io.stop();
    for (auto& w : workers)
        w->stop();
    for (auto& t : pool)
        t.join();
    proxy::join_parse_thread();
    worker_guards.clear();
    io.destroy_pending_work();
    for (auto& w : workers)
        w->destroy_pending_work();
    logging::write(logging::level::info, "stopped");
    logging::flush();
    return 0;
}

// --check-config: everything serve() checks before it opens the store or binds.
int check_config(const config::settings& settings) {
    auto checked = proxy::preflight(settings);
    if (!checked.ok()) {
        std::cerr << "fencekeeper: " << checked.error << "\n";
        return 2;
    }
    std::cout << "config ok\n";
    if (auto warning = proxy::exposure_warning(settings, checked.token.has_value()))
        std::cerr << "fencekeeper: " << *warning << "\n";
    if (checked.tls_expired)
        std::cerr << "fencekeeper: WARNING: the TLS certificate expired on "
                  << checked.tls_not_after << "\n";
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto parsed = config::parse_command_line(args);
    if (auto* error = std::get_if<config::parse_error>(&parsed)) {
        std::cerr << "fencekeeper: " << error->message << "\n"
                  << "Try 'fencekeeper --help' for more information.\n";
        return 2;
    }
    const auto& cl = std::get<config::command_line>(parsed);
    if (cl.show_help) {
        std::cout << config::usage_text();
        return 0;
    }
    if (cl.show_version) {
        std::cout << "fencekeeper " FK_VERSION "\n";
        return 0;
    }
    if (cl.check_config)
        return check_config(cl.values);
    try {
        return serve(args, cl.values);
    } catch (const std::exception& e) {
        std::cerr << "fencekeeper: fatal: " << e.what() << "\n";
        return 1;
    }
}
