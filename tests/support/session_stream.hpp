#pragma once
// Beast's in-memory test stream as a transport of basic_session (proxy/session.hpp): each
// read and write is noted in a log the test keeps, with whether a deadline was in force,
// and the session's half-close and close are noted too. No socket, no timer: deadlines
// are recorded, not waited for. For tests/unit/proxy_session_test.cpp and
// tests/fuzz/fuzz_session.cpp; each instantiates basic_session<session_stream> itself
// (include proxy/detail/session_impl.hpp there).

#include "proxy/session.hpp"

#include <boost/beast/_experimental/test/fail_count.hpp>
#include <boost/beast/_experimental/test/stream.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

namespace fk::test {

// What the session did to its transport.
struct transport_log {
    std::size_t ops = 0;              // reads and writes started: what fail_count counts
    std::size_t unguarded_ops = 0;    // of them, started with no deadline in force
    bool deadline = false;            // a deadline is in force
    bool shut_send = false;           // the session half-closed (the reply's end)
    std::size_t read_at_shutdown = 0; // bytes the session had taken from the wire by then
    bool closed = false;
};

// Beast's test stream, with each read and write noted in a log the test keeps.
class session_stream : public beast::test::stream {
public:
    session_stream(net::io_context& io, beast::test::fail_count& fc,
                   std::shared_ptr<transport_log> log)
        : beast::test::stream(io, fc), log_(std::move(log)) {}

    template <class Buffers, class Token>
    auto async_read_some(const Buffers& buffers, Token&& token) {
        note();
        return beast::test::stream::async_read_some(buffers, std::forward<Token>(token));
    }
    template <class Buffers, class Token>
    auto async_write_some(const Buffers& buffers, Token&& token) {
        note();
        return beast::test::stream::async_write_some(buffers, std::forward<Token>(token));
    }

    transport_log& log() { return *log_; }

private:
    void note() {
        ++log_->ops;
        if (!log_->deadline)
            ++log_->unguarded_ops;
    }
    std::shared_ptr<transport_log> log_;
};

} // namespace fk::test

template <> struct fk::proxy::session_transport<fk::test::session_stream> {
    static void expires_after(fk::test::session_stream& s, std::chrono::steady_clock::duration) {
        s.log().deadline = true;
    }
    static void expires_never(fk::test::session_stream& s) { s.log().deadline = false; }
    static void cancel(fk::test::session_stream& s) { s.close(); }
    static void shutdown_send(fk::test::session_stream& s, beast::error_code&) {
        s.log().shut_send = true;
        s.log().read_at_shutdown = s.nread_bytes();
    }
    static void close(fk::test::session_stream& s) {
        s.log().closed = true;
        s.close();
    }
    static std::string peer(fk::test::session_stream&) { return "test"; }
};
