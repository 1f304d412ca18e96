#include "backends/file/file_store.hpp"

// Recovery of the file store (docs/file-store.md, "Recovery"): what a restart finds after
// a clean stop, after a kill -9 at each failpoint of a write (a forked child opens the
// store, arms the failpoint and writes; the parent reopens the directory), after a power
// loss took files that the index names (the states built by hand from a crashed child's
// directory), the sweep after an unclean stop, and what a delete leaves of a key. The
// index is read with plain SQL (sqlite3.h), not through the store.

#include "backends/file/detail/crc32c.hpp"
#include "backends/file/detail/file_store_impl.hpp"
#include "backends/file/detail/index.hpp"
#include "backends/file/detail/key_path.hpp"
#include "backends/file/detail/sys.hpp"
#include "file_store_test_util.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace fk::store;
using fk::errc;
namespace net = boost::asio;
namespace detail = fk::store::detail;
using namespace fk::store::test;
using fk::config::file_flush;

namespace {

void write_file(const fs::path& p, const std::string& data) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << data;
    REQUIRE(out.good());
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

const char* flush_name(file_flush f) {
    return f == file_flush::syncfs ? "syncfs" : "fsync";
}

// A body that names itself at both ends: a torn or mixed body equals none of them.
std::string body_of(const std::string& tag, std::size_t size) {
    std::string b = "<" + tag + ">";
    while (b.size() + tag.size() + 3 < size)
        b += static_cast<char>('a' + b.size() % 26);
    b += "</" + tag + ">";
    return b;
}
// Small bodies ride in their redo rows (file.flush "syncfs"); large ones do not.
constexpr std::size_t small_size = 100;
constexpr std::size_t large_size = detail::journaled_body_max + 1000;

fs::path body_path(const fs::path& root, const std::string& key) {
    auto p = detail::object_path_for(key);
    REQUIRE(p.has_value());
    fs::path out = root / "objects";
    for (const auto& d : p->dirs)
        out /= d;
    return out / p->file;
}

std::vector<fs::path> tmp_files(const fs::path& root) {
    std::vector<fs::path> out;
    for (auto& e : fs::recursive_directory_iterator(root / "objects"))
        if (e.path().filename().string().find("~tmp~") != std::string::npos)
            out.push_back(e.path());
    return out;
}

// ROOT/index.db through SQLite's C API, read-only unless asked: a read-only connection
// neither checkpoints nor removes the WAL that a crash left, so the directory stays as
// the crash left it.
class index_db {
public:
    using row = std::vector<std::optional<std::string>>;

    explicit index_db(const fs::path& root, bool writable = false) {
        const int flags = writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY;
        const int rc = sqlite3_open_v2((root / detail::index_file).c_str(), &db_, flags, nullptr);
        REQUIRE_MESSAGE(rc == SQLITE_OK, sqlite3_errstr(rc));
    }
    ~index_db() { sqlite3_close(db_); }
    index_db(const index_db&) = delete;
    index_db& operator=(const index_db&) = delete;

    // Every row of `sql` (?1 bound to `arg` when given), each column as text, NULL as nullopt.
    std::vector<row> query(const std::string& sql, std::optional<std::string> arg = {}) {
        sqlite3_stmt* s = nullptr;
        REQUIRE_MESSAGE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) == SQLITE_OK,
                        sqlite3_errmsg(db_));
        if (arg)
            sqlite3_bind_text(s, 1, arg->data(), static_cast<int>(arg->size()), SQLITE_TRANSIENT);
        std::vector<row> out;
        int rc;
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
            row r;
            for (int i = 0; i < sqlite3_column_count(s); ++i) {
                if (sqlite3_column_type(s, i) == SQLITE_NULL) {
                    r.emplace_back(std::nullopt);
                    continue;
                }
                const auto* p = static_cast<const char*>(sqlite3_column_blob(s, i));
                r.emplace_back(
                    std::string(p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, i))));
            }
            out.push_back(std::move(r));
        }
        const std::string err = sqlite3_errmsg(db_);
        sqlite3_finalize(s);
        REQUIRE_MESSAGE(rc == SQLITE_DONE, err);
        return out;
    }
    std::string scalar(const std::string& sql, std::optional<std::string> arg = {}) {
        auto rows = query(sql, std::move(arg));
        REQUIRE(rows.size() == 1);
        REQUIRE(rows[0].size() == 1);
        REQUIRE(rows[0][0].has_value());
        return *rows[0][0];
    }
    void exec(const std::string& sql) {
        char* msg = nullptr;
        const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg);
        const std::string text = msg ? msg : "";
        sqlite3_free(msg);
        REQUIRE_MESSAGE(rc == SQLITE_OK, text);
    }

private:
    sqlite3* db_ = nullptr;
};

// The key's body file is the one its index row describes: same size, same CRC-32C.
void check_body_matches_row(const fs::path& root, const std::string& key) {
    CAPTURE(key);
    index_db db(root);
    auto rows = db.query("SELECT size, crc FROM keys WHERE key = ?1 AND lock IS NOT NULL", key);
    REQUIRE(rows.size() == 1);
    const std::string body = read_file(body_path(root, key));
    CHECK(std::to_string(body.size()) == rows[0][0].value_or("NULL"));
    CHECK(std::to_string(detail::crc32c(0, body)) == rows[0][1].value_or("NULL"));
}

// Copies a crashed store's directory (without index.db-shm, which SQLite rebuilds).
void copy_store(const fs::path& from, const fs::path& to) {
    fs::create_directories(to);
    for (auto& e : fs::directory_iterator(from)) {
        if (e.path().filename() == std::string(detail::index_file) + "-shm")
            continue;
        fs::copy(e.path(), to / e.path().filename(), fs::copy_options::recursive);
    }
}

// Runs `body` in a forked child, which is expected to die of SIGKILL at a failpoint that
// `body` arms. A child that returns from `body` exits with status 3; one whose body
// throws (a failed setup step, a failed REQUIRE) with 4; both are failures. Returns the
// child's wait status.
template <typename Body> int status_of_child(Body body) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        try {
            body();
        } catch (...) {
            ::_exit(4);
        }
        ::_exit(3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    return status;
}

void require_killed(int status) {
    INFO("child exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
                              << " (3: the failpoint was not reached, 4: a step before it "
                                 "failed)");
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
}

// In a child: a store, or an exception (the child exits with 4).
std::unique_ptr<store> child_open(net::io_context& io, const fs::path& root, file_flush flush) {
    auto r = open_file_store(io, root.string(), file_store_options{4, flush});
    if (!std::holds_alternative<std::unique_ptr<store>>(r))
        throw std::runtime_error("open failed");
    return std::move(std::get<std::unique_ptr<store>>(r));
}
void child_expect_ok(const write_result& r) {
    if (r.error != errc::ok)
        throw std::runtime_error("a write before the failpoint failed");
}

detail::file_store& impl(store& s) {
    auto* p = dynamic_cast<detail::file_store*>(&s);
    REQUIRE(p != nullptr);
    return *p;
}

// Captures what this process writes to fd 2 (the store's log lines, written at once by
// logging::write while no log writer thread was started, as in the unit tests).
class stderr_capture {
public:
    explicit stderr_capture(const fs::path& file) : file_(file) {
        std::fflush(stderr);
        fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        REQUIRE(fd_ >= 0);
        saved_ = ::dup(2);
        REQUIRE(saved_ >= 0);
        REQUIRE(::dup2(fd_, 2) == 2);
    }
    ~stderr_capture() { restore(); }
    stderr_capture(const stderr_capture&) = delete;
    stderr_capture& operator=(const stderr_capture&) = delete;

    // Restores fd 2; the JSON log lines whose "msg" is `msg`.
    std::vector<nlohmann::json> lines(const std::string& msg) {
        restore();
        std::vector<nlohmann::json> out;
        std::istringstream in(read_file(file_));
        for (std::string line; std::getline(in, line);) {
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_object() && j.value("msg", "") == msg)
                out.push_back(std::move(j));
        }
        return out;
    }

private:
    void restore() {
        if (saved_ < 0)
            return;
        std::fflush(stderr);
        ::dup2(saved_, 2);
        ::close(saved_);
        ::close(fd_);
        saved_ = -1;
    }
    fs::path file_;
    int fd_ = -1;
    int saved_ = -1;
};

void require_failpoints() {
    // Without failpoints no child would die: fail rather than pass having checked nothing.
    REQUIRE_MESSAGE(detail::failpoints_compiled(),
                    "built without -DFK_FAILPOINTS=ON (scripts/test.sh turns it on)");
}

} // namespace

TEST_CASE("reopen keeps fences, bodies, versions and tombstones") {
    temp_dir dir;
    auto root = dir.path / "root";
    net::io_context io;
    const std::string large = body_of("large", large_size);
    {
        auto s = open_ok(io, root);
        REQUIRE(run(io, s->put(put_req("a/b", "L", 5, "body", "application/x"))).error == errc::ok);
        REQUIRE(run(io, s->put(put_req("a/b", "L", 6, "body2", "application/y"))).error ==
                errc::ok);
        REQUIRE(run(io, s->put(put_req("big", "B", 1, large))).error == errc::ok);
        REQUIRE(run(io, s->put(put_req("gone", "G", 1, "x"))).error == errc::ok);
        REQUIRE(run(io, s->remove(del_req("gone", "G", 2))).error == errc::ok);
        REQUIRE(run(io, s->advance_fence({"F", 99, {}})).error == errc::ok);
    }
    for (int round = 0; round < 2; ++round) {
        CAPTURE(round);
        auto s = open_ok(io, root);
        auto g = run(io, s->get("a/b", true));
        CHECK(g.error == errc::ok);
        CHECK(g.body == "body2");
        CHECK(g.version == 2);
        CHECK(g.token == 6);
        CHECK(g.lock == "L");
        CHECK(g.content_type == "application/y");
        CHECK(run(io, s->get("big", true)).body == large);
        CHECK(run(io, s->get("gone", true)).error == errc::not_found);
        CHECK(run(io, s->read_fence("F")).fence.token == 99);
        CHECK(run(io, s->read_fence("G")).fence.token == 2);
        CHECK(run(io, s->put(put_req("a/b", "L", 5, "zombie"))).error == errc::stale_token);
        // A write after the delete continues the key's version count.
        auto again = run(io, s->put(put_req("gone", "H", 1, "back")));
        CHECK(again.error == errc::ok);
        CHECK(again.version == (round == 0 ? 2 : 3));
        CHECK(again.created);
        if (round == 0)
            CHECK(run(io, s->remove(del_req("gone", "H", 1))).error == errc::ok);
    }
}

TEST_CASE("redo rows written after the table was emptied are trimmed, and a clean stop "
          "leaves none") {
    // Issue 54: SQLite numbered a row in an emptied table 1 again, below the seq the
    // committer had trimmed through, so the rows written after an idle trim were never
    // deleted while running or by the clean stop; the next start replayed them.
    temp_dir dir;
    const fs::path root = dir.path / "root";
    net::io_context io;
    auto redo_count = [&] {
        index_db db(root);
        return db.scalar("SELECT count(*) FROM redo");
    };
    // Waits until the flusher and the idle trim (a second without batches) emptied the
    // table: 10 s at most, far above the 1 s the trim waits.
    auto wait_empty = [&] {
        for (int i = 0; i < 200 && redo_count() != "0"; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return redo_count();
    };
    {
        auto s = open_ok(io, root);
        for (int i = 0; i < 3; ++i) // three batches: seqs 1, 2, 3
            REQUIRE(run(io, s->put(put_req("a" + std::to_string(i), "L", 1, "one"))).error ==
                    errc::ok);
        REQUIRE(wait_empty() == "0");
        REQUIRE(run(io, s->put(put_req("b", "L", 1, "two"))).error == errc::ok);
        CHECK(wait_empty() == "0"); // trimmed while running
        REQUIRE(run(io, s->put(put_req("c", "L", 1, "three"))).error == errc::ok);
    } // a clean stop right after a write
    CHECK(redo_count() == "0");
    stderr_capture log(dir.path / "stderr");
    auto s = open_ok(io, root);
    const auto opened = log.lines("file store opened");
    REQUIRE(opened.size() == 1);
    CHECK(opened[0]["clean_stop"] == true);
    CHECK(opened[0]["redo_rows"] == 0);
    CHECK(run(io, s->get("c", true)).body == "three");
}

TEST_CASE("a second open of the same root fails with the holder's pid") {
    temp_dir dir;
    net::io_context io;
    auto s = open_ok(io, dir.path);
    auto second = open_file_store(io, dir.path.string(), {});
    REQUIRE(std::holds_alternative<open_error>(second));
    auto& err = std::get<open_error>(second);
    CHECK(err.exit_code == 2);
    CHECK(err.message.find("locked by another fencekeeper (pid " + std::to_string(::getpid()) +
                           ")") != std::string::npos);
    s.reset();
    CHECK(
        std::holds_alternative<std::unique_ptr<store>>(open_file_store(io, dir.path.string(), {})));
}

TEST_CASE("an index written by a newer fencekeeper is refused with exit status 2") {
    temp_dir dir;
    net::io_context io;
    {
        auto s = open_ok(io, dir.path);
        REQUIRE(run(io, s->put(put_req("k", "L", 3, "v"))).error == errc::ok);
    }
    {
        index_db db(dir.path, true);
        CHECK(db.scalar("PRAGMA user_version") == std::to_string(detail::index_format));
        db.exec("PRAGMA user_version = " + std::to_string(detail::index_format + 1));
    }
    auto r = open_file_store(io, dir.path.string(), {});
    REQUIRE(std::holds_alternative<open_error>(r));
    const auto& err = std::get<open_error>(r);
    CHECK(err.exit_code == 2);
    CAPTURE(err.message);
    CHECK(err.message.find("newer fencekeeper") != std::string::npos);
    CHECK(err.message.find("format " + std::to_string(detail::index_format + 1)) !=
          std::string::npos);
    // The refusal changed nothing: the format stays, and with it set back the data is there.
    {
        index_db db(dir.path, true);
        CHECK(db.scalar("PRAGMA user_version") == std::to_string(detail::index_format + 1));
        db.exec("PRAGMA user_version = " + std::to_string(detail::index_format));
    }
    auto s = open_ok(io, dir.path);
    CHECK(run(io, s->get("k", true)).body == "v");
    CHECK(run(io, s->read_fence("L")).fence.token == 3);
}

TEST_CASE("a lost index beside bodies refuses the start instead of forgetting every fence") {
    temp_dir dir;
    net::io_context io;
    {
        auto s = open_ok(io, dir.path);
        REQUIRE(run(io, s->put(put_req("k", "L", 3, "v"))).error == errc::ok);
    }
    std::filesystem::remove(dir.path / detail::index_file);
    for (int attempt = 0; attempt < 2; ++attempt) { // and again: the refusal left no index
        CAPTURE(attempt);
        auto r = open_file_store(io, dir.path.string(), {});
        REQUIRE(std::holds_alternative<open_error>(r));
        const auto& err = std::get<open_error>(r);
        CHECK(err.exit_code == 1);
        CAPTURE(err.message);
        CHECK(err.message.find("refusing to start empty") != std::string::npos);
        CHECK_FALSE(std::filesystem::exists(dir.path / detail::index_file));
    }
    // An empty objects/ is a new store, not a lost one.
    std::filesystem::remove_all(dir.path / "objects");
    auto s = open_ok(io, dir.path);
    CHECK(run(io, s->get("k", true)).error == errc::not_found);
}

// No failpoint: a child acknowledges a burst of concurrent writes (several per batch)
// and kills itself at once, before its flusher or a clean stop could tidy up.
TEST_CASE("kill -9 right after acknowledged writes loses none of them") {
    for (const auto flush : {file_flush::syncfs, file_flush::fsync}) {
        CAPTURE(flush_name(flush));
        temp_dir dir;
        constexpr int n = 24;
        auto key = [](int i) { return "t" + std::to_string(i % 3) + "/k" + std::to_string(i); };
        auto body = [](int i, const char* gen) {
            return body_of(std::string(gen) + std::to_string(i), i % 2 ? large_size : small_size);
        };
        // Keys i % 3 == 0 exist before: replaced, or deleted when i % 4 == 0 too.
        {
            net::io_context io;
            auto s = open_ok(io, dir.path, 4, flush);
            for (int i = 0; i < n; i += 3)
                REQUIRE(run(io, s->put(put_req(key(i), key(i), 1, body(i, "old")))).error ==
                        errc::ok);
        }
        const int status = status_of_child([&] {
            net::io_context io;
            auto s = child_open(io, dir.path, flush);
            int acked = 0;
            for (int i = 0; i < n; ++i) {
                auto done = [&acked](std::exception_ptr e, write_result r) {
                    if (!e && r.error == errc::ok)
                        ++acked;
                };
                if (i % 4 == 0 && i % 3 == 0)
                    net::co_spawn(io, s->remove(del_req(key(i), key(i), 2)), done);
                else
                    net::co_spawn(io, s->put(put_req(key(i), key(i), 2, body(i, "new"))), done);
            }
            io.run();
            if (acked != n)
                throw std::runtime_error("not every write was acknowledged");
            ::raise(SIGKILL);
        });
        require_killed(status);
        net::io_context io;
        auto s = open_ok(io, dir.path, 4, flush);
        CHECK(impl(*s).wait_for_sweep());
        for (int i = 0; i < n; ++i) {
            CAPTURE(key(i));
            auto g = run(io, s->get(key(i), true));
            if (i % 4 == 0 && i % 3 == 0) {
                CHECK(g.error == errc::not_found);
                CHECK_FALSE(fs::exists(body_path(dir.path, key(i))));
            } else {
                REQUIRE(g.error == errc::ok);
                CHECK(g.body == body(i, "new"));
                CHECK(g.version == (i % 3 == 0 ? 2 : 1));
            }
            CHECK(run(io, s->read_fence(key(i))).fence.token == 2);
        }
        CHECK(tmp_files(dir.path).empty());
        s.reset();
        for (int i = 0; i < n; ++i)
            if (i % 4 != 0 || i % 3 != 0)
                check_body_matches_row(dir.path, key(i));
    }
}

// A child writes some things and has them acknowledged, arms a failpoint and makes one
// more write, which kills it there; the parent reopens. For puts of new keys (body written
// in place) and replacements (temp file + rename), small bodies (in their redo row with
// "syncfs") and large ones, deletes, and both file.flush modes.
TEST_CASE("kill -9 at every failpoint of a write") {
    require_failpoints();
    enum class op { put_new, put_replace, remove };
    struct point {
        const char* name;
        bool committed; // the index commit happened before the kill
        bool on_delete; // a delete reaches it (it stages no body)
    };
    const point points[] = {
        {"before_body_fsync", false, false},  {"after_body_fsync", false, false},
        {"before_index_commit", false, true}, {"after_index_commit", true, true},
        {"after_rename", true, true},         {"before_reply", true, true},
    };
    const std::string acked_small = body_of("acked-small", small_size);
    const std::string acked_large = body_of("acked-large", large_size);
    int cases = 0;
    for (const auto flush : {file_flush::syncfs, file_flush::fsync})
        for (const op o : {op::put_new, op::put_replace, op::remove})
            for (const std::size_t size : {small_size, large_size})
                for (const auto& pt : points) {
                    if (o == op::remove && (size == large_size || !pt.on_delete))
                        continue;
                    CAPTURE(flush_name(flush));
                    CAPTURE(o == op::put_new       ? "a new key"
                            : o == op::put_replace ? "a replacement"
                                                   : "a delete");
                    CAPTURE(size);
                    const std::string point_name = pt.name;
                    CAPTURE(point_name);
                    ++cases;
                    const std::string key = o == op::put_new ? "d/new" : "d/k";
                    const std::string old_body = body_of("old", size);
                    const std::string new_body = body_of("new", size);
                    temp_dir dir;
                    const fs::path root = dir.path;
                    {
                        net::io_context io;
                        auto s = open_ok(io, root, 4, flush);
                        REQUIRE(run(io, s->put(put_req("d/k", "L", 1, old_body))).error ==
                                errc::ok);
                        REQUIRE(run(io, s->put(put_req("gone/x", "G", 1, "x"))).error == errc::ok);
                    }
                    const int status = status_of_child([&] {
                        net::io_context io;
                        auto s = child_open(io, root, flush);
                        child_expect_ok(run(io, s->put(put_req("acked/s", "A", 1, acked_small))));
                        child_expect_ok(run(io, s->put(put_req("acked/l", "A", 2, acked_large))));
                        child_expect_ok(run(io, s->remove(del_req("gone/x", "G", 2))));
                        child_expect_ok(run(io, s->advance_fence({"F", 7, {}})));
                        detail::set_failpoint_for_tests(pt.name);
                        if (o == op::remove)
                            run(io, s->remove(del_req(key, "L", 2)));
                        else
                            run(io, s->put(put_req(key, "L", 2, new_body)));
                    });
                    require_killed(status);

                    // What the crash left, before recovery touches it.
                    const fs::path file = body_path(root, key);
                    if (!pt.committed && o == op::put_new)
                        CHECK_MESSAGE(fs::exists(file), "no uncommitted body for the sweep");
                    if (!pt.committed && o == op::put_replace)
                        CHECK_MESSAGE(!tmp_files(root).empty(), "no temp file for the sweep");
                    if (point_name == "after_index_commit" && o == op::put_replace) {
                        CHECK(read_file(file) == old_body); // not renamed yet: rolled forward
                        CHECK(tmp_files(root).size() == 1);
                    }
                    if (point_name == "after_index_commit" && o == op::remove)
                        CHECK(fs::exists(file)); // not unlinked yet: redone

                    net::io_context io;
                    auto s = open_ok(io, root, 4, flush);
                    CHECK(impl(*s).wait_for_sweep()); // a kill -9 is an unclean stop
                    // Everything acknowledged before the kill.
                    CHECK(run(io, s->get("acked/s", true)).body == acked_small);
                    CHECK(run(io, s->get("acked/l", true)).body == acked_large);
                    CHECK(run(io, s->get("gone/x", true)).error == errc::not_found);
                    CHECK_FALSE(fs::exists(body_path(root, "gone/x")));
                    CHECK(run(io, s->read_fence("F")).fence.token == 7);
                    CHECK(run(io, s->read_fence("G")).fence.token == 2);
                    CHECK(run(io, s->read_fence("A")).fence.token == 2);
                    // The killed write: wholly there or wholly absent, its fence with it.
                    auto g = run(io, s->get(key, true));
                    CHECK(run(io, s->read_fence("L")).fence.token == (pt.committed ? 2 : 1));
                    if (o == op::put_new && pt.committed) {
                        REQUIRE(g.error == errc::ok);
                        CHECK(g.body == new_body);
                        CHECK(g.version == 1);
                        CHECK(g.token == 2);
                    } else if (o == op::put_new) {
                        CHECK(g.error == errc::not_found);
                        CHECK_FALSE(fs::exists(file)); // the sweep removed it
                    } else if (o == op::put_replace || !pt.committed) {
                        REQUIRE(g.error == errc::ok);
                        CHECK(g.body == (pt.committed ? new_body : old_body));
                        CHECK(g.version == (pt.committed ? 2 : 1));
                    } else {
                        CHECK(g.error == errc::not_found);
                        CHECK_FALSE(fs::exists(file));
                    }
                    if (key != "d/k")
                        CHECK(run(io, s->get("d/k", true)).body == old_body);
                    CHECK(tmp_files(root).empty());
                    // The recovered fence still fences; a write after a delete counts on.
                    CHECK(run(io, s->put(put_req(key, "L", 1, "zombie"))).error ==
                          (pt.committed ? errc::stale_token : errc::ok));
                    if (o == op::remove && pt.committed) {
                        auto back = run(io, s->put(put_req(key, "L", 3, "back")));
                        CHECK(back.error == errc::ok);
                        CHECK(back.version == 2);
                    }
                    s.reset();
                    for (const char* k : {"acked/s", "acked/l", "d/k"})
                        check_body_matches_row(root, k);
                    if (o == op::put_new && pt.committed)
                        check_body_matches_row(root, key);
                }
    CHECK(cases == 2 * (2 * 2 * 6 + 4));
}

// A keyed write killed after its commit: the client saw a lost connection (or a 504) and
// retries with the same key after the restart. The record committed with the write, so the
// retry replays it (nothing applied twice); killed before the commit, the retry applies.
TEST_CASE("kill -9 around a keyed write's commit: the retry after the restart replays it") {
    require_failpoints();
    const struct {
        const char* name;
        bool committed;
    } points[] = {{"before_index_commit", false},
                  {"after_index_commit", true},
                  {"after_rename", true},
                  {"before_reply", true}};
    auto keyed_put = [](std::string body) {
        auto r = put_req("d/k", "L", 2, std::move(body));
        r.idem = idempotency{"", "retry-1", std::string(32, 'f')};
        return r;
    };
    auto keyed_delete = [] {
        auto r = del_req("gone", "G", 2);
        r.idem = idempotency{"", "retry-2", std::string(32, 'g')};
        return r;
    };
    for (const bool replace : {false, true})
        for (const auto& pt : points) {
            const std::string point_name = pt.name;
            CAPTURE(point_name);
            CAPTURE(replace);
            temp_dir dir;
            const fs::path root = dir.path;
            {
                net::io_context io;
                auto s = open_ok(io, root);
                if (replace)
                    REQUIRE(run(io, s->put(put_req("d/k", "L", 1, "old"))).error == errc::ok);
                REQUIRE(run(io, s->put(put_req("gone", "G", 1, "x"))).error == errc::ok);
            }
            const int status = status_of_child([&] {
                net::io_context io;
                auto s = child_open(io, root, file_flush::syncfs);
                child_expect_ok(run(io, s->remove(keyed_delete())));
                detail::set_failpoint_for_tests(pt.name);
                run(io, s->put(keyed_put("new")));
            });
            require_killed(status);

            net::io_context io;
            auto s = open_ok(io, root);
            // The fence moves on meanwhile (another holder): the replay still answers.
            REQUIRE(run(io, s->advance_fence({"G", 9, {}})).error == errc::ok);
            auto d = run(io, s->remove(keyed_delete()));
            CHECK(d.error == errc::ok);
            CHECK(d.replayed);
            CHECK(d.token == 2);
            auto retry = run(io, s->put(keyed_put("new")));
            CHECK(retry.error == errc::ok);
            CHECK(retry.replayed == pt.committed);
            CHECK(retry.version == (replace ? 2 : 1));
            CHECK(retry.created == !replace);
            CHECK(retry.token == 2);
            auto g = run(io, s->get("d/k", true));
            CHECK(g.body == "new");
            CHECK(g.version == (replace ? 2 : 1)); // applied once
            // A second retry replays whichever attempt applied.
            CHECK(run(io, s->put(keyed_put("new"))).replayed);
            CHECK(impl(*s).wait_for_sweep());
            CHECK(tmp_files(root).empty());
            s.reset();
            check_body_matches_row(root, "d/k");
        }
}

// A store written before the idempotency table (format 1): the next start adds the table
// in place, keeps every row and body, and keyed writes work and survive the next restart.
TEST_CASE("a format-1 store is upgraded in place at start") {
    temp_dir dir;
    net::io_context io;
    {
        auto s = open_ok(io, dir.path);
        REQUIRE(run(io, s->put(put_req("a/b", "L", 5, "body"))).error == errc::ok);
        REQUIRE(run(io, s->put(put_req("gone", "G", 1, "x"))).error == errc::ok);
        REQUIRE(run(io, s->remove(del_req("gone", "G", 2))).error == errc::ok);
    }
    {
        // What format 1 was: this schema without the idempotency table and its index (and
        // without the floors table, which format 3 added).
        index_db db(dir.path, true);
        db.exec("DROP INDEX idempotency_expiry; DROP TABLE idempotency; DROP TABLE floors; "
                "PRAGMA user_version = 1");
    }
    stderr_capture log(dir.path / "stderr");
    {
        auto s = open_ok(io, dir.path);
        auto lines = log.lines("file store upgraded its index in place");
        REQUIRE(lines.size() == 1);
        CHECK(lines[0]["from_format"] == 1);
        CHECK(lines[0]["to_format"] == detail::index_format);
        auto g = run(io, s->get("a/b", true));
        CHECK(g.body == "body");
        CHECK(g.version == 1);
        CHECK(run(io, s->get("gone", true)).error == errc::not_found);
        CHECK(run(io, s->put(put_req("a/b", "L", 4, "zombie"))).error == errc::stale_token);
        auto req = put_req("a/b", "L", 5, "keyed");
        req.idem = idempotency{"", "after-upgrade", std::string(32, 'u')};
        auto w = run(io, s->put(req));
        CHECK(w.error == errc::ok);
        CHECK(w.version == 2);
    }
    {
        index_db db(dir.path);
        CHECK(db.scalar("PRAGMA user_version") == std::to_string(detail::index_format));
        CHECK(db.scalar("SELECT count(*) FROM idempotency") == "1");
        CHECK(db.scalar("SELECT count(*) FROM floors") == "0");
    }
    auto s = open_ok(io, dir.path);
    auto req = put_req("a/b", "L", 5, "keyed");
    req.idem = idempotency{"", "after-upgrade", std::string(32, 'u')};
    auto again = run(io, s->put(req));
    CHECK(again.replayed);
    CHECK(again.version == 2);
    CHECK(run(io, s->get("gone", true)).error == errc::not_found);
    auto back = run(io, s->put(put_req("gone", "G", 3, "back")));
    CHECK(back.version == 2); // the tombstone's count survived the upgrade
}

// A store written before fence floors (format 2): the next start adds the floors table in
// place, keeps every row, body and idempotency record, and floors work and survive the next
// restart.
TEST_CASE("a format-2 store is upgraded in place at start and gets fence floors") {
    temp_dir dir;
    net::io_context io;
    auto keyed = [] {
        auto r = put_req("jobs/a", "jobs/a", 5, "keyed");
        r.idem = idempotency{"", "before-upgrade", std::string(32, 'k')};
        return r;
    };
    {
        auto s = open_ok(io, dir.path);
        REQUIRE(run(io, s->put(put_req("jobs/a", "jobs/a", 3, "body"))).error == errc::ok);
        REQUIRE(run(io, s->put(keyed())).error == errc::ok);
        REQUIRE(run(io, s->put(put_req("gone", "G", 1, "x"))).error == errc::ok);
        REQUIRE(run(io, s->remove(del_req("gone", "G", 2))).error == errc::ok);
    }
    {
        // What format 2 was: this schema without the floors table.
        index_db db(dir.path, true);
        db.exec("DROP TABLE floors; PRAGMA user_version = 2");
    }
    stderr_capture log(dir.path / "stderr");
    {
        auto s = open_ok(io, dir.path);
        auto lines = log.lines("file store upgraded its index in place");
        REQUIRE(lines.size() == 1);
        CHECK(lines[0]["from_format"] == 2);
        CHECK(lines[0]["to_format"] == 3);
        auto g = run(io, s->get("jobs/a", true));
        CHECK(g.body == "keyed");
        CHECK(g.version == 2);
        CHECK(run(io, s->get("gone", true)).error == errc::not_found);
        CHECK(run(io, s->put(keyed())).replayed); // the record survived the upgrade
        CHECK(run(io, s->list_floors()).floors.empty());
        REQUIRE(run(io, s->raise_floor({"jobs/", 10, std::nullopt})).error == errc::ok);
        auto stale = run(io, s->put(put_req("jobs/a", "jobs/a", 9, "zombie")));
        CHECK(stale.error == errc::stale_token);
        CHECK(stale.current_token == 10);
        CHECK(stale.floor == std::optional<std::string>("jobs/"));
    }
    {
        index_db db(dir.path);
        CHECK(db.scalar("PRAGMA user_version") == "3");
        CHECK(db.scalar("SELECT token FROM floors WHERE prefix = 'jobs/'") == "10");
        CHECK(db.scalar("SELECT count(*) FROM keys") == "2");
    }
    auto s = open_ok(io, dir.path);
    auto floors = run(io, s->list_floors()).floors;
    REQUIRE(floors.size() == 1);
    CHECK(floors[0].prefix == "jobs/");
    CHECK(floors[0].token == 10);
    CHECK(run(io, s->read_fence("jobs/other")).fence.token == 10);
    CHECK(run(io, s->put(put_req("gone", "G", 3, "back"))).version == 2);
}

// A floor raise acknowledged just before a kill -9 is there after the restart (the index
// is the truth); one killed before its commit is not, and one killed after its commit is,
// though it was never acknowledged.
TEST_CASE("kill -9 after a floor raise: the restart enforces exactly the committed floors") {
    {
        temp_dir dir;
        const int status = status_of_child([&] {
            net::io_context io;
            auto s = child_open(io, dir.path, file_flush::syncfs);
            child_expect_ok(run(io, s->raise_floor({"", 7, std::nullopt})));
            child_expect_ok(run(io, s->raise_floor({"jobs/", 70, std::nullopt})));
            ::raise(SIGKILL);
        });
        require_killed(status);
        net::io_context io;
        auto s = open_ok(io, dir.path);
        auto floors = run(io, s->list_floors()).floors;
        REQUIRE(floors.size() == 2);
        CHECK(floors[1].token == 70);
        auto w = run(io, s->put(put_req("jobs/x", "jobs/x", 69, "v")));
        CHECK(w.error == errc::stale_token);
        CHECK(w.floor == std::optional<std::string>("jobs/"));
        CHECK(run(io, s->advance_fence({"other", 6, std::nullopt})).current_token == 7);
        CHECK(run(io, s->put(put_req("jobs/x", "jobs/x", 70, "v"))).error == errc::ok);
    }
    require_failpoints();
    // Not a structured binding: clang 14 cannot capture one (CAPTURE is a lambda).
    for (const auto& case_ :
         {std::pair{"before_index_commit", false}, std::pair{"after_index_commit", true}}) {
        const char* const point = case_.first;
        const bool committed = case_.second;
        CAPTURE(point);
        temp_dir dir;
        const int status = status_of_child([&, point = point] {
            net::io_context io;
            auto s = child_open(io, dir.path, file_flush::syncfs);
            child_expect_ok(run(io, s->raise_floor({"p/", 5, std::nullopt})));
            detail::set_failpoint_for_tests(point);
            run(io, s->raise_floor({"p/", 50, std::nullopt}));
        });
        require_killed(status);
        net::io_context io;
        auto s = open_ok(io, dir.path);
        auto floors = run(io, s->list_floors()).floors;
        REQUIRE(floors.size() == 1);
        CHECK(floors[0].token == (committed ? 50 : 5));
        CHECK(run(io, s->read_fence("p/q")).fence.token == (committed ? 50 : 5));
    }
}

// Kill at after_index_commit: the index names the new body's temp file, the rename has
// not happened. The next start renames it (and a crash during that start, right after the
// rename, changes nothing for the start after it).
TEST_CASE("a committed write whose rename did not happen is rolled forward") {
    require_failpoints();
    for (const auto flush : {file_flush::syncfs, file_flush::fsync})
        for (const std::size_t size : {small_size, large_size})
            for (const bool crash_in_recovery : {false, true}) {
                CAPTURE(flush_name(flush));
                CAPTURE(size);
                CAPTURE(crash_in_recovery);
                temp_dir dir;
                const fs::path root = dir.path / "root";
                const std::string old_body = body_of("old", size);
                const std::string new_body = body_of("new", size);
                {
                    net::io_context io;
                    auto s = open_ok(io, root, 4, flush);
                    REQUIRE(run(io, s->put(put_req("d/k", "L", 1, old_body))).error == errc::ok);
                }
                require_killed(status_of_child([&] {
                    net::io_context io;
                    auto s = child_open(io, root, flush);
                    detail::set_failpoint_for_tests("after_index_commit");
                    run(io, s->put(put_req("d/k", "L", 2, new_body, "text/new")));
                }));
                const auto tmps = tmp_files(root);
                REQUIRE(tmps.size() == 1);
                CHECK(read_file(tmps[0]) == new_body);
                CHECK(read_file(body_path(root, "d/k")) == old_body);
                {
                    index_db db(root);
                    CHECK(db.scalar("SELECT tmp FROM redo WHERE key = 'd/k'") ==
                          tmps[0].filename().string());
                    CHECK(db.scalar("SELECT version FROM keys WHERE key = 'd/k'") == "2");
                }
                if (crash_in_recovery) {
                    require_killed(status_of_child([&] {
                        detail::set_failpoint_for_tests("recovery_after_roll_forward");
                        net::io_context io;
                        child_open(io, root, flush);
                    }));
                    CHECK(read_file(body_path(root, "d/k")) == new_body);
                }
                stderr_capture log(dir.path / "stderr");
                net::io_context io;
                auto s = open_ok(io, root, 4, flush);
                const auto opened = log.lines("file store opened");
                REQUIRE(opened.size() == 1);
                CAPTURE(opened[0].dump());
                CHECK(opened[0]["clean_stop"] == false);
                CHECK(opened[0]["redo_rows"] == 1);
                CHECK(opened[0]["rolled_forward"] == (crash_in_recovery ? 0 : 1));
                auto g = run(io, s->get("d/k", true));
                CHECK(g.body == new_body);
                CHECK(g.version == 2);
                CHECK(g.token == 2);
                CHECK(g.content_type == "text/new");
                CHECK(read_file(body_path(root, "d/k")) == new_body);
                CHECK(impl(*s).wait_for_sweep());
                CHECK(tmp_files(root).empty());
                s.reset();
                check_body_matches_row(root, "d/k");
                index_db db(root);
                CHECK(db.scalar("SELECT count(*) FROM redo") == "0");
            }
}

// A kill -9 leaves the page cache intact; a power loss may not. With file.flush "syncfs"
// a small body is committed with a copy in its redo row and its file is written back
// later, so a power loss right after the commit can lose or tear that file (and even the
// directory it is in, or the rename that put it in place). Each state is built from the
// directory of a child killed right after the commit (before its renames, or before its
// reply), by damaging the files as the power loss would have.
TEST_CASE("a committed small write whose file a power loss took is restored from its redo row") {
    require_failpoints();
    const std::string old_body = "old";
    const std::string new_body = std::string("new\0body", 8);
    struct loss {
        const char* what;
        const char* failpoint;
        std::string key;
        std::function<void(const fs::path& root)> damage;
    };
    auto only_tmp = [](const fs::path& root) {
        auto t = tmp_files(root);
        REQUIRE(t.size() == 1);
        return t[0];
    };
    const loss cases[] = {
        {"a replacement: its temp file gone, the old body in place", "after_index_commit", "d/k",
         [&](const fs::path& root) { fs::remove(only_tmp(root)); }},
        {"a replacement: its temp file torn", "after_index_commit", "d/k",
         [&](const fs::path& root) { fs::resize_file(only_tmp(root), 3); }},
        {"a replacement: renamed, then the rename lost", "before_reply", "d/k",
         [&](const fs::path& root) {
             REQUIRE(tmp_files(root).empty());
             write_file(body_path(root, "d/k"), old_body);
         }},
        {"a new key written in place: the file gone", "after_index_commit", "d/new",
         [&](const fs::path& root) { REQUIRE(fs::remove(body_path(root, "d/new"))); }},
        {"a new key written in place: the file empty", "before_reply", "d/new",
         [&](const fs::path& root) { fs::resize_file(body_path(root, "d/new"), 0); }},
        {"a new key in new directories that are gone too", "after_index_commit", "e/f/new",
         [&](const fs::path& root) { REQUIRE(fs::remove_all(root / "objects" / "e~") == 3); }},
    };
    for (const auto& c : cases) {
        CAPTURE(c.what);
        temp_dir dir;
        const fs::path crashed = dir.path / "crashed";
        {
            net::io_context io;
            auto s = open_ok(io, crashed);
            REQUIRE(run(io, s->put(put_req("d/k", "L", 1, old_body))).error == errc::ok);
        }
        require_killed(status_of_child([&] {
            net::io_context io;
            auto s = child_open(io, crashed, file_flush::syncfs);
            detail::set_failpoint_for_tests(c.failpoint);
            run(io, s->put(put_req(c.key, "L", 7, new_body, "text/new")));
        }));
        {
            index_db db(crashed);
            CHECK(db.scalar("SELECT body FROM redo WHERE key = ?1", c.key) == new_body);
        }
        const fs::path root = dir.path / "root";
        copy_store(crashed, root);
        c.damage(root);
        CHECK(read_file(body_path(root, c.key)) != new_body);

        stderr_capture log(dir.path / "stderr");
        net::io_context io;
        auto s = open_ok(io, root);
        const auto opened = log.lines("file store opened");
        REQUIRE(opened.size() == 1);
        CAPTURE(opened[0].dump());
        CHECK(opened[0]["restored_from_redo"] == 1);
        auto g = run(io, s->get(c.key, true));
        REQUIRE(g.error == errc::ok);
        CHECK(g.body == new_body);
        CHECK(g.token == 7);
        CHECK(g.content_type == "text/new");
        CHECK(read_file(body_path(root, c.key)) == new_body);
        CHECK(run(io, s->put(put_req(c.key, "L", 6, "zombie"))).error == errc::stale_token);
        CHECK(impl(*s).wait_for_sweep());
        CHECK(tmp_files(root).empty());
        s.reset();
        check_body_matches_row(root, c.key);
        s = open_ok(io, root); // and the restored state stays
        CHECK(run(io, s->get(c.key, true)).body == new_body);
    }
}

// A large body has no copy in its redo row: it was made durable before the commit, so its
// file cannot be missing after a crash. If it is (the disk lied, someone deleted it), the
// store refuses to start rather than serve the key without its body.
TEST_CASE("a committed large body that is missing on disk refuses the start") {
    require_failpoints();
    temp_dir dir;
    const fs::path root = dir.path;
    {
        net::io_context io;
        auto s = open_ok(io, root);
        REQUIRE(run(io, s->put(put_req("d/k", "L", 1, "old"))).error == errc::ok);
    }
    require_killed(status_of_child([&] {
        net::io_context io;
        auto s = child_open(io, root, file_flush::syncfs);
        detail::set_failpoint_for_tests("after_index_commit");
        run(io, s->put(put_req("d/k", "L", 2, body_of("new", large_size))));
    }));
    const auto tmps = tmp_files(root);
    REQUIRE(tmps.size() == 1);
    fs::resize_file(tmps[0], 10);
    net::io_context io;
    auto r = open_file_store(io, root.string(), {});
    REQUIRE(std::holds_alternative<open_error>(r));
    CHECK(std::get<open_error>(r).exit_code == 1);
    CAPTURE(std::get<open_error>(r).message);
    CHECK(std::get<open_error>(r).message.find("missing or damaged") != std::string::npos);
}

// After an unclean stop the sweeper removes what the crash left under objects/: temp
// files, bodies of keys the index does not have (a new key's body written in place whose
// commit never happened), empty directories; never a committed body, never a file that is
// no body's. After a clean stop there is no sweep.
TEST_CASE("the sweep after an unclean stop removes what a crash left; a clean stop owes none") {
    require_failpoints();
    temp_dir dir;
    const fs::path root = dir.path;
    const fs::path objects = root / "objects";
    {
        net::io_context io;
        auto s = open_ok(io, root);
        REQUIRE(run(io, s->put(put_req("d/k", "L", 1, "v"))).error == errc::ok);
        REQUIRE(run(io, s->put(put_req("a/b/c", "L", 2, "abc"))).error == errc::ok);
        REQUIRE(run(io, s->put(put_req("t/x", "T", 1, "x"))).error == errc::ok);
        REQUIRE(run(io, s->remove(del_req("t/x", "T", 2))).error == errc::ok);
    }
    // A crash between staging a new key's body in place (in a new directory) and its commit.
    require_killed(status_of_child([&] {
        net::io_context io;
        auto s = child_open(io, root, file_flush::syncfs);
        detail::set_failpoint_for_tests("before_index_commit");
        run(io, s->put(put_req("n/new", "L", 3, "uncommitted")));
    }));
    REQUIRE(fs::exists(objects / "n~" / "new"));
    // More of what crashes leave (temp files of writes in flight, bodies whose commit never
    // came, directories made for them), and two files that are nobody's body.
    write_file(objects / "x~tmp~0123", "junk");
    write_file(objects / "d~" / "k~tmp~4567", "junk");
    write_file(objects / "orphan", "junk"); // key "orphan": no row
    fs::create_directories(objects / "t~"); // key "t/x": deleted
    write_file(objects / "t~" / "x", "junk");
    fs::create_directories(objects / "e1~" / "e2~"); // empty
    write_file(objects / "not~a~body", "keep");      // no key maps here
    write_file(root / "operator-notes", "keep");     // outside objects/

    {
        stderr_capture log(dir.path / "stderr");
        net::io_context io;
        auto s = open_ok(io, root);
        CHECK(impl(*s).wait_for_sweep());
        const auto swept = log.lines("file store swept what an unclean stop left behind");
        REQUIRE(swept.size() == 1);
        CAPTURE(swept[0].dump());
        CHECK(swept[0]["finished"] == true);
        CHECK(swept[0]["temp_files"] == 2);
        CHECK(swept[0]["uncommitted_bodies"] == 3); // n/new, orphan, t/x
        for (const char* gone : {"x~tmp~0123", "d~/k~tmp~4567", "orphan", "t~/x", "n~/new", "e1~"})
            CHECK_MESSAGE(!fs::exists(objects / gone), gone);
        // Directories that held only what the sweep removed are removed too.
        CHECK_FALSE(fs::exists(objects / "t~"));
        CHECK_FALSE(fs::exists(objects / "n~"));
        CHECK(read_file(objects / "not~a~body") == "keep");
        CHECK(read_file(root / "operator-notes") == "keep");
        CHECK(run(io, s->get("d/k", true)).body == "v");
        CHECK(run(io, s->get("a/b/c", true)).body == "abc");
        CHECK(run(io, s->get("n/new", true)).error == errc::not_found);
        CHECK(run(io, s->read_fence("L")).fence.token == 2);
    }
    // That start swept and stopped cleanly: the next one does not sweep, so what is
    // planted now stays.
    write_file(objects / "y~tmp~89ab", "junk");
    write_file(objects / "orphan2", "junk");
    {
        stderr_capture log(dir.path / "stderr2");
        net::io_context io;
        auto s = open_ok(io, root);
        CHECK_FALSE(impl(*s).wait_for_sweep());
        const auto opened = log.lines("file store opened");
        REQUIRE(opened.size() == 1);
        CHECK(opened[0]["clean_stop"] == true);
        CHECK(run(io, s->get("d/k", true)).body == "v");
    }
    CHECK(fs::exists(objects / "y~tmp~89ab"));
    CHECK(fs::exists(objects / "orphan2"));
}

TEST_CASE("deleting keys reclaims their empty directories; a deleted key's row keeps its version") {
    temp_dir dir;
    const fs::path root = dir.path;
    const fs::path objects = root / "objects";
    net::io_context io;
    {
        auto s = open_ok(io, root);
        for (const char* k : {"a/b/c", "a/b/d", "a/x"})
            REQUIRE(run(io, s->put(put_req(k, "A", 1, k, "text/plain"))).error == errc::ok);
        REQUIRE(fs::is_directory(objects / "a~" / "b~"));
        REQUIRE(run(io, s->remove(del_req("a/b/c", "A", 2))).error == errc::ok);
        CHECK_FALSE(fs::exists(objects / "a~" / "b~" / "c"));
        CHECK(fs::is_directory(objects / "a~" / "b~")); // still holds d
        REQUIRE(run(io, s->remove(del_req("a/b/d", "A", 3))).error == errc::ok);
        CHECK_FALSE(fs::exists(objects / "a~" / "b~"));
        CHECK(fs::is_directory(objects / "a~")); // still holds x
        REQUIRE(run(io, s->remove(del_req("a/x", "A", 4))).error == errc::ok);
        CHECK_FALSE(fs::exists(objects / "a~"));
        CHECK(fs::is_directory(objects));
        // The directories come back with the key, whose version counts on.
        auto again = run(io, s->put(put_req("a/b/c", "A", 5, "again")));
        CHECK(again.error == errc::ok);
        CHECK(again.version == 2);
        CHECK(run(io, s->get("a/b/c", true)).body == "again");
        REQUIRE(run(io, s->remove(del_req("a/b/c", "A", 6))).error == errc::ok);
        CHECK_FALSE(fs::exists(objects / "a~"));
    }
    {
        index_db db(root);
        const auto rows = db.query("SELECT key, version, lock, token, ms, size, crc, content_type "
                                   "FROM keys ORDER BY key");
        REQUIRE(rows.size() == 3);
        const std::pair<const char*, const char*> expected[] = {
            {"a/b/c", "2"}, {"a/b/d", "1"}, {"a/x", "1"}};
        for (std::size_t i = 0; i < rows.size(); ++i) {
            CAPTURE(i);
            CHECK(rows[i][0] == expected[i].first);
            CHECK(rows[i][1] == expected[i].second);
            for (std::size_t col = 2; col < rows[i].size(); ++col)
                CHECK_FALSE(rows[i][col].has_value());
        }
        CHECK(db.scalar("SELECT count(*) FROM keys WHERE lock IS NULL") == "3");
        // Fences are never forgotten.
        CHECK(db.scalar("SELECT token FROM fences WHERE lock = 'A'") == "6");
        CHECK(db.scalar("SELECT count(*) FROM redo") == "0");
    }
    auto s = open_ok(io, root);
    CHECK(run(io, s->get("a/x", true)).error == errc::not_found);
    CHECK(run(io, s->put(put_req("a/x", "A", 7, "x"))).version == 2);
}

// A kill between a delete's commit and its unlink: the restart unlinks the body, and the
// sweep removes the directories that this left empty.
TEST_CASE("a committed delete whose unlink did not happen is redone, its directories reclaimed") {
    require_failpoints();
    temp_dir dir;
    const fs::path root = dir.path;
    {
        net::io_context io;
        auto s = open_ok(io, root);
        REQUIRE(run(io, s->put(put_req("a/b/c", "A", 1, "abc"))).error == errc::ok);
        REQUIRE(run(io, s->put(put_req("z", "A", 2, "z"))).error == errc::ok);
    }
    require_killed(status_of_child([&] {
        net::io_context io;
        auto s = child_open(io, root, file_flush::syncfs);
        detail::set_failpoint_for_tests("after_index_commit");
        run(io, s->remove(del_req("a/b/c", "A", 3)));
    }));
    REQUIRE(read_file(root / "objects" / "a~" / "b~" / "c") == "abc");
    net::io_context io;
    auto s = open_ok(io, root);
    CHECK_FALSE(fs::exists(root / "objects" / "a~" / "b~" / "c"));
    CHECK(run(io, s->get("a/b/c", true)).error == errc::not_found);
    CHECK(impl(*s).wait_for_sweep());
    CHECK_FALSE(fs::exists(root / "objects" / "a~"));
    CHECK(run(io, s->get("z", true)).body == "z");
    CHECK(run(io, s->read_fence("A")).fence.token == 3);
    s.reset();
    index_db db(root);
    CHECK(db.scalar("SELECT version FROM keys WHERE key = 'a/b/c' AND lock IS NULL") == "1");
}
