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
// --timeline FILE (open loop) also writes one line per 10 ms of the schedule: requests due
// in it, their median and worst latency. It tells a few long stalls from a slow service.
//
// Build: g++ -O2 -std=c++20 -pthread openloop.cpp -o openloop   (Boost >= 1.81, headers only)
// Output: one line of key=value pairs on stdout.

#include <boost/asio.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace net = boost::asio;
using tcp = net::ip::tcp;
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
    std::string timeline;  // open loop: per-10 ms table of the schedule's latencies
};

[[noreturn]] void usage(const char* msg) {
    std::fprintf(stderr,
                 "openloop: %s\n"
                 "usage: openloop --port P [--host H] [--mode health|put|cycle] [--tag T]\n"
                 "       (--rate R --duration S | --count N) [--connections C] [--threads T]\n"
                 "       [--body-bytes B] [--keys K] [--token T] [--grace S] [--timeline FILE]\n",
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
    if (o.connections < 1 || o.threads < 1 || o.keys < 1)
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

struct worker;

struct conn {
    explicit conn(worker& w);
    net::awaitable<void> run();
    net::awaitable<bool> connect();
    net::awaitable<int> exchange(const std::string& request); // status, or -1 on error

    worker& w;
    tcp::socket sock;
    net::steady_timer wake;
    std::string buf;
    bool has_job = false;
    sclock::time_point job;
};

struct worker {
    worker(const options& opt, int index, tcp::resolver::results_type eps)
        : o(opt), id(index), endpoints(std::move(eps)), body(opt.body_bytes, 'x') {}

    const options& o;
    int id;
    tcp::resolver::results_type endpoints;
    std::string body;
    net::io_context io{1};
    std::vector<std::unique_ptr<conn>> conns;
    std::vector<conn*> idle;
    std::deque<sclock::time_point> pending;
    bool stopping = false;
    int live = 0;
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

    net::awaitable<void> dispatch(sclock::time_point t0, double rate, sclock::time_point end) {
        net::steady_timer timer(io);
        const auto interval = std::chrono::duration<double>(1.0 / rate);
        for (long long k = 0;; ++k) {
            auto due = t0 + std::chrono::duration_cast<sclock::duration>(interval * k);
            if (due >= end)
                break;
            if (sclock::now() < due) {
                timer.expires_at(due);
                co_await timer.async_wait(net::use_awaitable);
            }
            if (!idle.empty()) {
                conn* c = idle.back();
                idle.pop_back();
                c->job = due;
                c->has_job = true;
                c->wake.cancel();
            } else {
                pending.push_back(due);
            }
        }
        // Let late answers arrive, then stop; what is still queued or in flight is
        // counted as incomplete (and its latency as at least the grace period).
        timer.expires_at(end + std::chrono::duration_cast<sclock::duration>(
                                   std::chrono::duration<double>(o.grace)));
        stopping = true;
        for (auto* c : idle)
            c->wake.cancel();
        idle.clear();
        while (live > 0 && sclock::now() < timer.expiry()) {
            net::steady_timer poll(io, std::chrono::milliseconds(10));
            co_await poll.async_wait(net::use_awaitable);
        }
        const auto give_up = sclock::now();
        for (auto& p : pending) {
            st.latency_ns.push_back((give_up - p).count());
            ++st.incomplete;
        }
        for (auto& c : conns)
            if (c->has_job) {
                st.latency_ns.push_back((give_up - c->job).count());
                ++st.incomplete;
            }
        pending.clear();
        io.stop();
    }
};

conn::conn(worker& wk) : w(wk), sock(wk.io), wake(wk.io) {}

net::awaitable<bool> conn::connect() {
    boost::system::error_code ec;
    sock = tcp::socket(w.io);
    co_await net::async_connect(sock, w.endpoints, net::redirect_error(net::use_awaitable, ec));
    if (ec)
        co_return false;
    sock.set_option(tcp::no_delay(true));
    buf.clear();
    // One untimed GET /healthz first. A server may close a connection that has not sent a
    // request within its header timeout (fencekeeper: 10 s, like nginx's
    // client_header_timeout) but keeps a used keep-alive connection for its idle timeout
    // (60 s); at low rates some of the connections are first needed after 10 s and were
    // counted as socket errors.
    co_return co_await exchange("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") >= 0;
}

net::awaitable<int> conn::exchange(const std::string& request) {
    boost::system::error_code ec;
    auto tok = net::redirect_error(net::use_awaitable, ec);
    co_await net::async_write(sock, net::buffer(request), tok);
    if (ec)
        co_return -1;
    std::size_t hdr =
        co_await net::async_read_until(sock, net::dynamic_buffer(buf), "\r\n\r\n", tok);
    if (ec)
        co_return -1;
    // "HTTP/1.1 201 ..."
    int status = -1;
    if (hdr > 12)
        std::from_chars(buf.data() + 9, buf.data() + 12, status);
    const std::string_view head(buf.data(), hdr);
    std::size_t body = 0;
    if (auto p = find_header(head, "\r\ncontent-length:"); p != std::string_view::npos) {
        while (p < head.size() && head[p] == ' ')
            ++p;
        std::from_chars(head.data() + p, head.data() + head.size(), body);
    }
    bool close = find_header(head, "\r\nconnection: close") != std::string_view::npos;
    if (buf.size() < hdr + body) {
        co_await net::async_read(sock, net::dynamic_buffer(buf),
                                 net::transfer_exactly(hdr + body - buf.size()), tok);
        if (ec)
            co_return -1;
    }
    buf.erase(0, hdr + body);
    if (close) {
        sock.close(ec);
        if (!co_await connect())
            co_return -1;
    }
    co_return status;
}

net::awaitable<void> conn::run() {
    ++w.live;
    struct leave {
        int& n;
        ~leave() { --n; }
    } guard{w.live};
    if (!co_await connect()) {
        w.record(-1);
        co_return;
    }
    const bool closed_loop = w.o.count > 0;
    for (;;) {
        long long n = 0;
        if (closed_loop) {
            n = next_request.fetch_add(1);
            if (n >= w.o.count)
                co_return;
        } else {
            if (!w.pending.empty()) {
                job = w.pending.front();
                w.pending.pop_front();
                has_job = true;
            } else {
                if (w.stopping)
                    co_return;
                has_job = false;
                w.idle.push_back(this);
                wake.expires_at(sclock::time_point::max());
                boost::system::error_code ec;
                co_await wake.async_wait(net::redirect_error(net::use_awaitable, ec));
                if (!has_job) {
                    if (w.stopping)
                        co_return;
                    continue;
                }
            }
            n = next_request.fetch_add(1);
        }
        int status = co_await exchange(make_request(w.o, n, w.body));
        if (!closed_loop) {
            const auto lat = (sclock::now() - job).count();
            w.st.latency_ns.push_back(lat);
            if (!w.o.timeline.empty())
                w.st.timeline.emplace_back(job.time_since_epoch().count(), lat);
            has_job = false;
        }
        w.record(status);
        if (status < 0) {
            boost::system::error_code ec;
            sock.close(ec);
            if (!co_await connect())
                co_return;
        }
    }
}

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
    net::io_context rio;
    tcp::resolver resolver(rio);
    auto eps = resolver.resolve(o.host, o.port);

    std::vector<std::unique_ptr<worker>> workers;
    for (int t = 0; t < o.threads; ++t) {
        auto w = std::make_unique<worker>(o, t, eps);
        int n = o.connections / o.threads + (t < o.connections % o.threads ? 1 : 0);
        for (int i = 0; i < n; ++i)
            w->conns.push_back(std::make_unique<conn>(*w));
        workers.push_back(std::move(w));
    }

    // Start the schedule a little in the future so every connection is open by then.
    const auto t0 = sclock::now() + std::chrono::milliseconds(300);
    const auto end = t0 + std::chrono::duration_cast<sclock::duration>(
                              std::chrono::duration<double>(o.duration));
    const auto start = sclock::now();
    std::vector<std::thread> threads;
    for (auto& w : workers) {
        for (auto& c : w->conns)
            net::co_spawn(w->io, c->run(), net::detached);
        if (o.rate > 0)
            net::co_spawn(w->io, w->dispatch(t0, o.rate / o.threads, end), net::detached);
        threads.emplace_back([&w] { w->io.run(); });
    }
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
    // Connections still waiting on the stopped io_contexts are abandoned, not unwound.
    std::_Exit(all.errors > 0 && all.completed == 0 ? 1 : 0);
}
