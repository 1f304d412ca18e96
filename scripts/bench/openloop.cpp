// openloop: a small HTTP/1.1 load generator for scripts/bench.sh.
//
// Open loop (--rate R): requests are scheduled at a fixed rate, R per second in total,
// whatever the server does. A request due while every connection is busy waits in a
// queue, and its latency is measured from its *scheduled* send time, not from when a
// connection became free, so a slow server cannot hide its stalls by slowing the load
// down (no coordinated omission). Prints p50/p90/p99/p99.9/max and the achieved rate.
//
// Closed loop (--count N): each connection sends its next request as soon as the last
// answer arrived, until N requests were sent in total. Used to prime fences and to write
// many distinct locks quickly.
//
// Requests (--mode):
//   health   GET /healthz
//   put      PUT /v1/resources/TAG-n, Fencing-Lock TAG-n, Fencing-Token n+1 (or --token):
//            one fresh lock and key per request
//   cycle    PUT /v1/resources/TAG-i, Fencing-Lock TAG-i, i = n mod --keys, token --token:
//            with a high token once over the keys primes their fences; afterwards with a
//            lower token every request is stale
//
// --tick-us U (open loop) sleeps to ticks U µs apart instead of to each request's due time:
// the requests due since the last tick go out together, each timed from its own due time,
// so up to one tick of lateness counts against the server. wrk2, the usual open-loop HTTP
// tool, paces the same way with whole-millisecond timers (its delay_request() rounds every
// wait up to the next millisecond). Each thread's ticks are offset like its schedule. On
// the benchmark's P load at 11k/s (two cores shared with the server) 1000 µs cut this
// program's CPU per request from 25-31 to 18-22 µs, and with it fencekeeper's wake-ups.
//
// --timeline FILE (open loop) also writes one line per 10 ms of the schedule: requests due
// in it, their median and worst latency. It tells a few long stalls from a slow service.
//
// Each thread runs its share of the connections on its own level-triggered epoll set, with
// plain non-blocking send/recv and epoll_pwait2 (nanosecond timeouts) for the schedule: per
// request one send, one receive, and the epoll waits it shares with whatever else is ready
// (the threads' schedules are offset from each other, so their requests interleave).
// The first version ran on Asio coroutines and spent about 45 CPU-us per request where
// this one spends about 30 and wrk (closed loop, so it rarely sleeps) about 18, measured on
// the P latency load: Asio tried a receive before the answer could be there, updated its
// timerfd twice per scheduled request and polled the reactor several times in between.
// On the benchmark's two shared cores that CPU is taken from the server being measured.
//
// Build: g++ -O2 -std=c++20 -pthread openloop.cpp -o openloop   (Linux >= 5.11, glibc >= 2.35)
// Output: one line of key=value pairs on stdout.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using sclock = std::chrono::steady_clock;

namespace {

struct options {
    std::string host = "127.0.0.1";
    std::string port;
    std::string mode = "health";
    std::string tag = "ol";
    double rate = 0;      // open loop when > 0
    long long count = 0;  // closed loop when > 0
    double duration = 10; // seconds (open loop)
    int connections = 64;
    int threads = 2;
    std::size_t body_bytes = 256;
    long long keys = 1000; // cycle mode
    long long token = -1;  // -1: n+1 per request
    double grace = 5;      // seconds to wait for late answers after the schedule ends
    long long tick_us = 0; // open loop: sleep to tick boundaries instead of each due time
    std::string timeline;  // open loop: per-10 ms table of the schedule's latencies
};

[[noreturn]] void usage(const char* msg) {
    std::fprintf(stderr,
                 "openloop: %s\n"
                 "usage: openloop --port P [--host H] [--mode health|put|cycle] [--tag T]\n"
                 "       (--rate R --duration S | --count N) [--connections C] [--threads T]\n"
                 "       [--body-bytes B] [--keys K] [--token T] [--grace S] [--timeline FILE]\n"
                 "       [--tick-us U]\n",
                 msg);
    std::exit(2);
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc)
                usage(("missing value for " + a).c_str());
            return argv[++i];
        };
        if (a == "--host")
            o.host = val();
        else if (a == "--port")
            o.port = val();
        else if (a == "--mode")
            o.mode = val();
        else if (a == "--tag")
            o.tag = val();
        else if (a == "--rate")
            o.rate = std::stod(val());
        else if (a == "--count")
            o.count = std::stoll(val());
        else if (a == "--duration")
            o.duration = std::stod(val());
        else if (a == "--connections")
            o.connections = std::stoi(val());
        else if (a == "--threads")
            o.threads = std::stoi(val());
        else if (a == "--body-bytes")
            o.body_bytes = std::stoul(val());
        else if (a == "--keys")
            o.keys = std::stoll(val());
        else if (a == "--token")
            o.token = std::stoll(val());
        else if (a == "--grace")
            o.grace = std::stod(val());
        else if (a == "--tick-us")
            o.tick_us = std::stoll(val());
        else if (a == "--timeline")
            o.timeline = val();
        else
            usage(("unknown argument " + a).c_str());
    }
    if (o.port.empty())
        usage("--port is required");
    if ((o.rate > 0) == (o.count > 0))
        usage("give exactly one of --rate and --count");
    if (o.mode != "health" && o.mode != "put" && o.mode != "cycle")
        usage("bad --mode");
    if (o.connections < 1 || o.threads < 1 || o.keys < 1 || o.tick_us < 0)
        usage("bad numbers");
    o.threads = std::min(o.threads, o.connections);
    return o;
}

// Shared by all threads: the request counter that names locks and keys.
std::atomic<long long> next_request{0};

std::string make_request(const options& o, long long n, const std::string& body) {
    if (o.mode == "health")
        return "GET /healthz HTTP/1.1\r\nHost: " + o.host + "\r\n\r\n";
    std::string name, token;
    if (o.mode == "put") {
        name = o.tag + "-" + std::to_string(n);
        token = std::to_string(o.token >= 0 ? o.token : n + 1);
    } else {
        name = o.tag + "-" + std::to_string(n % o.keys);
        token = std::to_string(o.token >= 0 ? o.token : 1);
    }
    std::string r;
    r.reserve(200 + 2 * name.size() + body.size());
    r += "PUT /v1/resources/" + name + " HTTP/1.1\r\nHost: " + o.host +
         "\r\nFencing-Lock: " + name + "\r\nFencing-Token: " + token +
         "\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n";
    r += body;
    return r;
}

// Position just after `name` (lower case) in `head`, compared case-insensitively.
std::size_t find_header(std::string_view head, std::string_view name) {
    for (std::size_t i = 0; i + name.size() <= head.size(); ++i) {
        std::size_t j = 0;
        while (j < name.size() && std::tolower(static_cast<unsigned char>(head[i + j])) == name[j])
            ++j;
        if (j == name.size())
            return i + j;
    }
    return std::string_view::npos;
}

struct stats {
    std::vector<std::int64_t> latency_ns;                        // open loop only
    std::vector<std::pair<std::int64_t, std::int64_t>> timeline; // (due, latency), --timeline
    long long completed = 0, s2xx = 0, s409 = 0, other = 0, errors = 0, incomplete = 0;
    void merge(const stats& s) {
        latency_ns.insert(latency_ns.end(), s.latency_ns.begin(), s.latency_ns.end());
        timeline.insert(timeline.end(), s.timeline.begin(), s.timeline.end());
        completed += s.completed;
        s2xx += s.s2xx;
        s409 += s.s409;
        other += s.other;
        errors += s.errors;
        incomplete += s.incomplete;
    }
};

constexpr std::string_view warmup_request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

struct conn {
    int fd = -1;
    std::string out; // bytes of the current request not yet sent
    std::size_t out_off = 0;
    std::string in;        // bytes of the current response received so far
    bool busy = false;     // a request is out (or being sent)
    bool warmup = false;   // the request out is the untimed GET /healthz of a new connection
    bool timed = false;    // open loop: the request out has a scheduled time, `job`
    bool want_out = false; // EPOLLOUT registered (a send was short)
    sclock::time_point job;
};

struct worker {
    worker(const options& opt, int index, const sockaddr_storage& a, socklen_t alen)
        : o(opt), id(index), addr(a), addr_len(alen), body(opt.body_bytes, 'x') {}

    const options& o;
    int id;
    sockaddr_storage addr;
    socklen_t addr_len;
    std::string body;
    int ep = -1;
    std::vector<conn> conns;
    std::vector<conn*> idle;                // open connections with nothing out
    std::deque<sclock::time_point> pending; // open loop: due, waiting for a connection
    int open = 0;                           // connections that are usable
    stats st;

    void record(int status) {
        if (status < 0)
            ++st.errors;
        else {
            ++st.completed;
            if (status >= 200 && status < 300)
                ++st.s2xx;
            else if (status == 409)
                ++st.s409;
            else
                ++st.other;
        }
    }

    // Blocking connect (only at start and after an error or a "Connection: close"), then
    // the untimed GET /healthz: a server may close a connection that has not sent a request
    // within its header timeout (fencekeeper: 10 s, like nginx's client_header_timeout)
    // but keeps a used keep-alive connection for its idle timeout (60 s); at low rates
    // some connections are first needed after 10 s.
    bool connect(conn& c) {
        drop(c);
        c.in.clear();
        c.busy = c.warmup = c.timed = c.want_out = false;
        const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return false;
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), addr_len) != 0) {
            ::close(fd);
            return false;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = &c;
        if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            ::close(fd);
            return false;
        }
        c.fd = fd;
        ++open;
        c.warmup = true;
        return send(c, std::string(warmup_request));
    }

    // Starts sending a request; false on a socket error.
    bool send(conn& c, std::string request) {
        c.busy = true;
        c.out = std::move(request);
        c.out_off = 0;
        return flush(c);
    }

    bool flush(conn& c) {
        while (c.out_off < c.out.size()) {
            const ssize_t n =
                ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
            if (n > 0) {
                c.out_off += static_cast<std::size_t>(n);
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return watch_out(c, true);
            return false;
        }
        return watch_out(c, false);
    }

    bool watch_out(conn& c, bool on) {
        if (c.want_out == on)
            return true;
        epoll_event ev{};
        ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
        ev.data.ptr = &c;
        c.want_out = on;
        return ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev) == 0;
    }

    // The next request for an idle connection, if there is one to send now.
    void next(conn& c, sclock::time_point now) {
        if (o.count > 0) {
            const long long n = next_request.fetch_add(1);
            if (n >= o.count) {
                c.busy = false;
                return;
            }
            if (!send(c, make_request(o, n, body)))
                fail(c, now);
            return;
        }
        if (pending.empty()) {
            c.busy = false;
            idle.push_back(&c);
            return;
        }
        start_timed(c, pending.front(), now);
        pending.pop_front();
    }

    void start_timed(conn& c, sclock::time_point due, sclock::time_point now) {
        c.timed = true;
        c.job = due;
        if (!send(c, make_request(o, next_request.fetch_add(1), body)))
            fail(c, now);
    }

    // The request out on `c` is over: status, or -1 for a socket error.
    void finish(conn& c, int status, sclock::time_point now) {
        if (c.timed) {
            const auto lat = (now - c.job).count();
            st.latency_ns.push_back(lat);
            if (!o.timeline.empty())
                st.timeline.emplace_back(c.job.time_since_epoch().count(), lat);
            c.timed = false;
        }
        if (!c.warmup || status < 0)
            record(status);
        c.warmup = false;
    }

    void fail(conn& c, sclock::time_point now) {
        finish(c, -1, now);
        if (!connect(c))
            drop(c);
    }

    // Closes the connection (if open) and leaves it unusable.
    void drop(conn& c) {
        idle.erase(std::remove(idle.begin(), idle.end(), &c), idle.end());
        if (c.fd >= 0) {
            ::close(c.fd);
            c.fd = -1;
            --open;
        }
        c.busy = false;
    }

    // Reads what is there; when `c.in` holds a whole response, finishes its request.
    void readable(conn& c, sclock::time_point now) {
        char chunk[8192];
        const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0 && !c.busy) { // an idle connection the server closed: open a new one
            if (!connect(c))
                drop(c);
            return;
        }
        if (n <= 0 || !c.busy) { // closed or failed during a request, or unasked-for bytes
            fail(c, now);
            return;
        }
        c.in.append(chunk, static_cast<std::size_t>(n));
        const std::size_t e = c.in.find("\r\n\r\n");
        if (e == std::string::npos)
            return;
        const std::size_t hdr = e + 4;
        const std::string_view head(c.in.data(), hdr);
        std::size_t body_len = 0;
        if (auto p = find_header(head, "\r\ncontent-length:"); p != std::string_view::npos) {
            while (p < head.size() && head[p] == ' ')
                ++p;
            std::from_chars(head.data() + p, head.data() + head.size(), body_len);
        }
        if (c.in.size() < hdr + body_len)
            return;
        // "HTTP/1.1 201 ..."
        int status = -1;
        if (hdr > 12)
            std::from_chars(c.in.data() + 9, c.in.data() + 12, status);
        const bool close = find_header(head, "\r\nconnection: close") != std::string_view::npos;
        c.in.erase(0, hdr + body_len);
        finish(c, status, now);
        if (close && !connect(c)) {
            drop(c);
            return;
        }
        if (!close)
            next(c, now);
    }

    void run(sclock::time_point t0, sclock::time_point end) {
        ep = ::epoll_create1(EPOLL_CLOEXEC);
        for (auto& c : conns)
            if (!connect(c))
                record(-1);
        const bool open_loop = o.rate > 0;
        // This thread's share of the schedule, offset so that the threads' requests interleave.
        const double interval = o.threads / o.rate;
        const double offset = interval * id / o.threads;
        long long k = 0;
        auto due_of = [&](long long i) {
            return t0 + std::chrono::duration_cast<sclock::duration>(std::chrono::duration<double>(
                            offset + interval * static_cast<double>(i)));
        };
        const auto give_up = end + std::chrono::duration_cast<sclock::duration>(
                                       std::chrono::duration<double>(o.grace));
        std::vector<epoll_event> events(256);
        for (;;) {
            auto now = sclock::now();
            sclock::time_point wake = sclock::time_point::max();
            if (open_loop) {
                for (auto due = due_of(k); due <= now && due < end; due = due_of(++k)) {
                    if (!idle.empty()) {
                        conn* c = idle.back();
                        idle.pop_back();
                        start_timed(*c, due, now);
                    } else {
                        pending.push_back(due);
                    }
                }
                const auto due = due_of(k);
                if (due < end && o.tick_us > 0) {
                    // The first of this thread's ticks at or after the due time (--tick-us).
                    const sclock::duration tick = std::chrono::microseconds(o.tick_us);
                    const auto phase = t0 + tick * id / o.threads;
                    const auto ticks =
                        due <= phase ? 0 : (due - phase + tick - sclock::duration(1)) / tick;
                    wake = phase + ticks * tick;
                } else if (due < end)
                    wake = due;
                else {
                    bool busy = false;
                    for (auto& c : conns)
                        busy = busy || (c.fd >= 0 && c.busy);
                    if ((!busy && pending.empty()) || open == 0 || now >= give_up)
                        break;
                    wake = give_up;
                }
            } else {
                // Closed loop: each connection sends its next request when an answer
                // arrives (after its warm-up), until --count requests were sent.
                bool busy = false;
                for (auto& c : conns)
                    busy = busy || (c.fd >= 0 && c.busy);
                if (!busy)
                    break;
            }
            timespec ts{};
            const timespec* tp = nullptr;
            if (wake != sclock::time_point::max()) {
                const auto left = std::max<sclock::duration>(wake - now, sclock::duration::zero());
                const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
                ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
                ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
                tp = &ts;
            }
            const int n =
                ::epoll_pwait2(ep, events.data(), static_cast<int>(events.size()), tp, nullptr);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                std::perror("openloop: epoll_pwait2");
                std::exit(1);
            }
            now = sclock::now();
            for (int i = 0; i < n; ++i) {
                auto& c = *static_cast<conn*>(events[static_cast<std::size_t>(i)].data.ptr);
                if (c.fd < 0)
                    continue;
                const auto ev = events[static_cast<std::size_t>(i)].events;
                if ((ev & EPOLLOUT) && !flush(c)) {
                    fail(c, now);
                    continue;
                }
                if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
                    readable(c, now);
            }
        }
        // What is still queued or in flight is counted as incomplete (its latency as at
        // least the grace period).
        const auto stop = sclock::now();
        for (auto& p : pending) {
            st.latency_ns.push_back((stop - p).count());
            ++st.incomplete;
        }
        for (auto& c : conns)
            if (c.fd >= 0 && c.timed) {
                st.latency_ns.push_back((stop - c.job).count());
                ++st.incomplete;
            }
        pending.clear();
    }
};

double pct(const std::vector<std::int64_t>& sorted, double p) {
    if (sorted.empty())
        return 0;
    std::size_t i =
        static_cast<std::size_t>(p / 100.0 * static_cast<double>(sorted.size() - 1) + 0.5);
    return static_cast<double>(sorted[std::min(i, sorted.size() - 1)]) / 1e6;
}

// One line per 10 ms of the schedule: its start (ms after the first due time), how many
// requests were due in it, and their largest and median latency. Finds stalls in time.
void write_timeline(const std::string& path, std::vector<std::pair<std::int64_t, std::int64_t>> tl,
                    std::int64_t t0) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f)
        return;
    std::sort(tl.begin(), tl.end());
    std::fprintf(f, "ms\tdue\tp50_ms\tmax_ms\n");
    constexpr std::int64_t bucket = 10'000'000;
    for (std::size_t i = 0; i < tl.size();) {
        const std::int64_t b = (tl[i].first - t0) / bucket;
        std::vector<std::int64_t> lat;
        for (; i < tl.size() && (tl[i].first - t0) / bucket == b; ++i)
            lat.push_back(tl[i].second);
        std::sort(lat.begin(), lat.end());
        std::fprintf(f, "%lld\t%zu\t%.2f\t%.2f\n", static_cast<long long>(b * 10), lat.size(),
                     static_cast<double>(lat[lat.size() / 2]) / 1e6,
                     static_cast<double>(lat.back()) / 1e6);
    }
    std::fclose(f);
}

} // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(o.host.c_str(), o.port.c_str(), &hints, &res); rc != 0 || !res) {
        std::fprintf(stderr, "openloop: cannot resolve %s:%s: %s\n", o.host.c_str(), o.port.c_str(),
                     ::gai_strerror(rc));
        return 2;
    }
    sockaddr_storage addr{};
    std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
    const socklen_t addr_len = res->ai_addrlen;
    ::freeaddrinfo(res);

    std::vector<std::unique_ptr<worker>> workers;
    for (int t = 0; t < o.threads; ++t) {
        auto w = std::make_unique<worker>(o, t, addr, addr_len);
        const int n = o.connections / o.threads + (t < o.connections % o.threads ? 1 : 0);
        w->conns.resize(static_cast<std::size_t>(n));
        workers.push_back(std::move(w));
    }

    // Start the schedule a little in the future so every connection is open by then.
    const auto t0 = sclock::now() + std::chrono::milliseconds(300);
    const auto end = t0 + std::chrono::duration_cast<sclock::duration>(
                              std::chrono::duration<double>(o.duration));
    const auto start = sclock::now();
    std::vector<std::thread> threads;
    for (auto& w : workers)
        threads.emplace_back([&w, t0, end] { w->run(t0, end); });
    for (auto& t : threads)
        t.join();
    const double elapsed =
        o.rate > 0 ? o.duration : std::chrono::duration<double>(sclock::now() - start).count();

    stats all;
    for (auto& w : workers)
        all.merge(w->st);
    std::sort(all.latency_ns.begin(), all.latency_ns.end());
    std::printf("mode=%s requests=%lld achieved_rps=%.1f target_rps=%.1f seconds=%.2f "
                "status_2xx=%lld status_409=%lld status_other=%lld errors=%lld incomplete=%lld",
                o.mode.c_str(), all.completed, static_cast<double>(all.completed) / elapsed, o.rate,
                elapsed, all.s2xx, all.s409, all.other, all.errors, all.incomplete);
    if (o.rate > 0)
        std::printf(" p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f",
                    pct(all.latency_ns, 50), pct(all.latency_ns, 90), pct(all.latency_ns, 99),
                    pct(all.latency_ns, 99.9), pct(all.latency_ns, 100));
    std::printf("\n");
    std::fflush(stdout);
    if (!o.timeline.empty())
        write_timeline(o.timeline, all.timeline, t0.time_since_epoch().count());
    std::_Exit(all.errors > 0 && all.completed == 0 ? 1 : 0);
}
