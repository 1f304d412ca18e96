// fencekeeper: parse the command line, open the store, serve HTTP until SIGTERM/SIGINT,
// drain, stop the store, exit 0 (CONTRACT §7).

#include "backends/make_store.hpp"
#include "config/logging.hpp"
#include "config/parse.hpp"
#include "config/settings.hpp"
#include "proxy/server.hpp"

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#ifndef FK_VERSION
#define FK_VERSION "0.1.0" // keep in step with project(VERSION) in CMakeLists.txt
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

int serve(const config::settings& settings) {
    logging::set_level(settings.log_level);
    const int threads = config::effective_threads(settings);
    io_context io{threads};

    auto opened = store::make_store(io, settings);
    if (auto* failure = std::get_if<store::open_error>(&opened)) {
        std::cerr << "fencekeeper: " << failure->message << "\n";
        return failure->exit_code;
    }
    auto store = std::move(std::get<std::unique_ptr<store::store>>(opened));

    proxy::server server{io, *store, settings};
    if (auto error = server.listen()) {
        std::cerr << "fencekeeper: " << *error << "\n";
        store->stop();
        return 1;
    }
    server.start();
    auto address = server.local_address();
    std::cout << "listening on " << address << std::endl; // flushed: scripts wait for it
    logging::write(logging::level::info, "listening",
                   {{"address", address}, {"threads", threads}, {"store", settings.store}});

    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int i = 0; i < threads; ++i)
        pool.emplace_back([&io] {
            for (;;) {
                try {
                    io.run();
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
    for (auto& t : pool)
        t.join();
    io.destroy_pending_work();
    logging::write(logging::level::info, "stopped");
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
    try {
        return serve(cl.values);
    } catch (const std::exception& e) {
        std::cerr << "fencekeeper: fatal: " << e.what() << "\n";
        return 1;
    }
}
