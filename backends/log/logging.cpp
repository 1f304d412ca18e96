#include "backends/log/logging.hpp"

#include "fence/json_string.hpp"
#include "fence/rfc3339.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace fk::logging {

namespace {

std::atomic<level> g_level{level::info};

// Replace instead of throwing: a log line must never fail because a client sent a
// name with broken UTF-8.
std::string dump(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool is_reserved(const std::string& key) {
    return key == "ts" || key == "level" || key == "msg";
}

void write_all(const char* p, std::size_t left) noexcept {
    while (left > 0) {
        const ssize_t n = ::write(2, p, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return; // stderr is gone; nothing sensible left to do
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

// The buffer between the threads that log and the one that writes. Lines are appended
// whole under mu_, so a flush never splits one.
class sink {
public:
    static constexpr std::size_t flush_bytes = 64 * 1024;
    static constexpr std::size_t max_bytes = 8 * 1024 * 1024;
    static constexpr std::chrono::milliseconds interval{50};

    static sink& instance() {
        static sink s;
        return s;
    }

    void append(std::string_view line, bool urgent) noexcept {
        bool wake = false;
        bool no_writer = false;
        {
            std::lock_guard lock{mu_};
            if (pending_.size() + line.size() > max_bytes) {
                ++dropped_;
                return;
            }
            try {
                pending_.append(line);
            } catch (...) {
                ++dropped_;
                return;
            }
            wake = urgent || pending_.size() >= flush_bytes;
            no_writer = !thread_.joinable();
        }
        // No writer thread (not started, exit has begun, or it could not start): write now.
        if (no_writer)
            flush();
        else if (wake)
            cv_.notify_one();
    }

    // Writes what is pending now, on the calling thread. write_mu_ is held from the swap
    // to the end of the write, so batches reach fd 2 in order and a flush() returns only
    // once every line appended before it has been written.
    void flush() noexcept {
        std::lock_guard write_lock{write_mu_};
        std::size_t dropped = 0;
        {
            std::lock_guard lock{mu_};
            batch_.swap(pending_);
            dropped = std::exchange(dropped_, 0);
        }
        write_batch(batch_, dropped);
        batch_.clear();
        if (batch_.capacity() > 4 * flush_bytes)
            std::string{}.swap(batch_);
    }

    void start() noexcept {
        std::lock_guard lock{mu_};
        if (stopping_ || thread_.joinable())
            return;
        try {
            thread_ = std::thread([this] { run(); });
            std::atexit([] { sink::instance().stop(); });
        } catch (...) {
            stopping_ = true; // no thread: lines are written synchronously
        }
    }

    ~sink() { stop(); }

private:
    sink() = default;

    void stop() noexcept {
        std::thread t;
        {
            std::lock_guard lock{mu_};
            stopping_ = true;
            t = std::move(thread_);
        }
        cv_.notify_one();
        if (t.joinable() && t.get_id() != std::this_thread::get_id())
            t.join();
        else if (t.joinable())
            t.detach();
        flush();
    }

    void run() noexcept {
        for (;;) {
            bool stop = false;
            {
                std::unique_lock lock{mu_};
                cv_.wait_for(lock, interval,
                             [this] { return stopping_ || pending_.size() >= flush_bytes; });
                stop = stopping_;
            }
            flush();
            if (stop)
                return;
        }
    }

    static void write_batch(const std::string& batch, std::size_t dropped) noexcept {
        write_all(batch.data(), batch.size());
        if (dropped > 0) {
            std::string line;
            try {
                line = format_line(level::error, "log lines dropped: stderr was blocked",
                                   {field{"dropped", static_cast<std::int64_t>(dropped)}},
                                   std::chrono::system_clock::now());
                line += '\n';
            } catch (...) {
                return;
            }
            write_all(line.data(), line.size());
        }
    }

    std::mutex mu_; // pending_, dropped_, stopping_, thread_
    std::condition_variable cv_;
    std::string pending_;
    std::size_t dropped_ = 0;
    bool stopping_ = false;
    std::thread thread_;
    std::mutex write_mu_; // batch_; keeps batches in order between run() and flush()
    std::string batch_;
};

void append_field(std::string& line, const field& f) {
    line += ',';
    fence::append_json_string(line, f.key);
    line += ':';
    switch (f.type) {
    case field::kind::string:
        fence::append_json_string(line, f.text);
        break;
    case field::kind::integer: {
        char buf[24];
        const int n = std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(f.number));
        line.append(buf, static_cast<std::size_t>(n));
        break;
    }
    case field::kind::null:
        line += "null";
        break;
    }
}

void append_head(std::string& line, level l, std::string_view msg,
                 std::chrono::system_clock::time_point when) {
    line += R"({"ts":")";
    fence::append_rfc3339_ms(
        line,
        std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count());
    line += R"(","level":")";
    line += to_string(l);
    line += R"(","msg":)";
    fence::append_json_string(line, msg);
}

} // namespace

void set_level(level l) noexcept {
    g_level.store(l, std::memory_order_relaxed);
}

level current_level() noexcept {
    return g_level.load(std::memory_order_relaxed);
}

std::string format_line(level l, std::string_view msg, const nlohmann::json& fields,
                        std::chrono::system_clock::time_point when) {
    std::string line;
    line.reserve(96 + msg.size());
    append_head(line, l, msg, when);
    if (fields.is_object()) {
        for (const auto& [key, value] : fields.items()) {
            line += ',';
            fence::append_json_string(line, is_reserved(key) ? "field." + key : key);
            line += ':';
            line += dump(value);
        }
    } else if (!fields.is_null()) {
        line += R"(,"fields":)";
        line += dump(fields);
    }
    line += '}';
    return line;
}

std::string format_line(level l, std::string_view msg, std::initializer_list<field> fields,
                        std::chrono::system_clock::time_point when) {
    std::string line;
    line.reserve(160 + msg.size());
    append_head(line, l, msg, when);
    for (const auto& f : fields)
        append_field(line, f);
    line += '}';
    return line;
}

void write(level l, std::string_view msg, const nlohmann::json& fields) {
    if (!enabled(l))
        return;
    std::string line;
    try {
        line = format_line(l, msg, fields, std::chrono::system_clock::now());
        line += '\n';
    } catch (const std::exception&) {
        // Only allocation can fail here; a lost log line beats a failed request.
        return;
    }
    sink::instance().append(line, l >= level::error);
}

void write(level l, std::string_view msg) {
    write(l, msg, nlohmann::json());
}

void write_fields(level l, std::string_view msg, std::initializer_list<field> fields) {
    if (!enabled(l))
        return;
    // Formatted into a per-thread buffer: no allocation once it has grown.
    thread_local std::string line;
    try {
        line.clear();
        append_head(line, l, msg, std::chrono::system_clock::now());
        for (const auto& f : fields)
            append_field(line, f);
        line += "}\n";
    } catch (const std::exception&) {
        return;
    }
    sink::instance().append(line, l >= level::error);
    if (line.capacity() > 64 * 1024)
        std::string{}.swap(line);
}

void start_writer() noexcept {
    sink::instance().start();
}

void flush() noexcept {
    sink::instance().flush();
}

} // namespace fk::logging
