#include "backends/file/file_store.hpp"

#include "backends/file/detail/crc32c.hpp"
#include "backends/file/detail/file_store_impl.hpp"
#include "backends/file/detail/journal.hpp"
#include "backends/file/detail/sys.hpp"
#include "file_store_test_util.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <fstream>
#include <optional>
#include <sys/wait.h>
#include <unistd.h>

using namespace fk::store;
using fk::errc;
namespace fence = fk::fence;
namespace net = boost::asio;
namespace detail = fk::store::detail;
using namespace fk::store::test;

namespace {

void append_file(const fs::path& p, const std::string& data) {
    std::ofstream out(p, std::ios::binary | std::ios::app);
    out << data;
}

void write_file(const fs::path& p, const std::string& data) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << data;
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// Runs `body` in a forked child with FAILPOINT armed (it kills the child with SIGKILL
// when reached); a child that returns from `body` exits with status 3. Returns the
// child's wait status.
template <typename Body> int status_of_child_at(const std::string& failpoint, Body body) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        detail::set_failpoint_for_tests(failpoint);
        body();
        ::_exit(3); // the failpoint was not reached
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    return status;
}

} // namespace

TEST_CASE("reopen keeps fences, bodies, versions and tombstones") {
    temp_dir dir;
    auto root = dir.path / "root";
    net::io_context io;
    {
        auto s = open_ok(io, root);
        REQUIRE(run(io, s->put(put_req("a/b", "L", 5, "body", "application/x"))).error == errc::ok);
        REQUIRE(run(io, s->put(put_req("a/b", "L", 6, "body2", "application/y"))).error ==
                errc::ok);
        REQUIRE(run(io, s->put(put_req("gone", "G", 1, "x"))).error == errc::ok);
        REQUIRE(run(io, s->remove(del_req("gone", "G", 2))).error == errc::ok);
        REQUIRE(run(io, s->advance_fence("F", 99)).error == errc::ok);
    }
    for (int round = 0; round < 2; ++round) { // the second round reads a pure snapshot
        auto s = open_ok(io, root);
        auto g = run(io, s->get("a/b", true));
        CHECK(g.error == errc::ok);
        CHECK(g.body == "body2");
        CHECK(g.version == 2);
        CHECK(g.token == 6);
        CHECK(g.lock == "L");
        CHECK(g.content_type == "application/y");
        CHECK(run(io, s->get("gone", true)).error == errc::not_found);
        CHECK(run(io, s->read_fence("F")).fence.token == 99);
        CHECK(run(io, s->read_fence("G")).fence.token == 2);
        CHECK(run(io, s->put(put_req("a/b", "L", 5, "zombie"))).error == errc::stale_token);
        auto again = run(io, s->put(put_req("gone", "H", 1, "back")));
        CHECK(again.version == (round == 0 ? 2 : 3)); // continues after the tombstone
        CHECK(again.created);
        if (round == 0)
            CHECK(run(io, s->remove(del_req("gone", "H", 1))).error == errc::ok);
    }
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

TEST_CASE("a torn journal tail is dropped; damage followed by intact records refuses to start") {
    temp_dir dir;
    net::io_context io;
    {
        auto s = open_ok(io, dir.path);
        REQUIRE(run(io, s->put(put_req("k", "k", 3, "v"))).error == errc::ok);
    }
    std::string extra;
    detail::append_record(extra, detail::fence_record("torn", 50, 1));

    SUBCASE("torn tail") {
        append_file(dir.path / "journal", extra.substr(0, extra.size() - 3));
        auto s = open_ok(io, dir.path);
        CHECK(run(io, s->get("k", true)).body == "v");
        CHECK(run(io, s->read_fence("torn")).error == errc::not_found);
        CHECK(run(io, s->advance_fence("torn", 1)).error == errc::ok);
        s.reset();
        s = open_ok(io, dir.path); // the tail was cut away by the snapshot
        CHECK(run(io, s->read_fence("torn")).fence.token == 1);
    }
    SUBCASE("damage in the middle") {
        std::string journal = read_file(dir.path / "journal");
        journal[journal.size() - 5] ^= 0x01; // the last intact record
        write_file(dir.path / "journal", journal + extra);
        auto r = open_file_store(io, dir.path.string(), {});
        REQUIRE(std::holds_alternative<open_error>(r));
        CHECK(std::get<open_error>(r).message.find("damaged") != std::string::npos);
    }
}

TEST_CASE("stray temp files are removed at startup") {
    temp_dir dir;
    net::io_context io;
    {
        auto s = open_ok(io, dir.path);
        REQUIRE(run(io, s->put(put_req("d/k", "d", 1, "v"))).error == errc::ok);
    }
    write_file(dir.path / "objects" / "x~tmp~0123", "junk");
    write_file(dir.path / "objects" / "d~" / "k~tmp~4567", "junk");
    auto s = open_ok(io, dir.path);
    CHECK_FALSE(fs::exists(dir.path / "objects" / "x~tmp~0123"));
    CHECK_FALSE(fs::exists(dir.path / "objects" / "d~" / "k~tmp~4567"));
    CHECK(run(io, s->get("d/k", true)).body == "v");
}

TEST_CASE("a committed write whose rename did not happen is rolled forward") {
    temp_dir dir;
    net::io_context io;
    {
        auto s = open_ok(io, dir.path);
        REQUIRE(run(io, s->put(put_req("d/k", "L", 1, "old"))).error == errc::ok);
    }
    // The state after a crash between the journal's fdatasync and the rename.
    std::string body = "new body";
    write_file(dir.path / "objects" / "d~" / "k~tmp~feed", body);
    auto rec = detail::put_record("d/k", "L", 7, 2, 1000);
    rec.size = body.size();
    rec.body_crc = detail::crc32c(0, body);
    rec.tmp = "k~tmp~feed";
    rec.content_type = "text/new";
    std::string line;
    detail::append_record(line, rec);

    SUBCASE("roll forward") {
        append_file(dir.path / "journal", line);
        auto s = open_ok(io, dir.path);
        auto g = run(io, s->get("d/k", true));
        CHECK(g.body == "new body");
        CHECK(g.version == 2);
        CHECK(g.token == 7);
        CHECK(g.content_type == "text/new");
        CHECK(read_file(dir.path / "objects" / "d~" / "k") == "new body");
        CHECK_FALSE(fs::exists(dir.path / "objects" / "d~" / "k~tmp~feed"));
    }
    SUBCASE("neither body nor temp file: fall back, keep the fence") {
        fs::remove(dir.path / "objects" / "d~" / "k~tmp~feed");
        append_file(dir.path / "journal", line);
        auto s = open_ok(io, dir.path);
        auto g = run(io, s->get("d/k", true));
        CHECK(g.body == "old");
        CHECK(g.version == 1);
        CHECK(run(io, s->read_fence("L")).fence.token == 7);
    }
    SUBCASE("a committed delete whose unlink was lost") {
        std::string del;
        detail::append_record(del, detail::del_record("d/k", "L", 8, 1, 1000));
        append_file(dir.path / "journal", del);
        auto s = open_ok(io, dir.path);
        CHECK(run(io, s->get("d/k", true)).error == errc::not_found);
        CHECK_FALSE(fs::exists(dir.path / "objects" / "d~" / "k"));
    }
}

// A power loss can take a journaled body's file (written without a sync) while its
// committed record, which carries the body, survives: recovery rewrites the file.
TEST_CASE("a committed write whose file a power loss took is restored from its record") {
    temp_dir dir;
    net::io_context io;
    {
        auto s = open_ok(io, dir.path);
        REQUIRE(run(io, s->put(put_req("d/k", "L", 1, "old"))).error == errc::ok);
    }
    const std::string body = std::string("new\0body", 8);
    auto line_for = [&](const std::string& key, const std::string& tmp) {
        auto rec = detail::put_record(key, "L", 7, key == "d/k" ? 2 : 1, 1000);
        rec.size = body.size();
        rec.body_crc = detail::crc32c(0, body);
        rec.tmp = tmp;
        rec.content_type = "text/new";
        rec.body = body;
        std::string line;
        detail::append_record(line, rec);
        return line;
    };
    auto check_restored = [&](const fs::path& root, const std::string& key, const fs::path& file) {
        auto s = open_ok(io, root);
        auto g = run(io, s->get(key, true));
        REQUIRE(g.error == errc::ok);
        CHECK(g.body == body);
        CHECK(g.token == 7);
        CHECK(g.content_type == "text/new");
        CHECK(read_file(file) == body);
        CHECK(run(io, s->put(put_req(key, "L", 6, "zombie"))).error == errc::stale_token);
        for (auto& e : fs::recursive_directory_iterator(root / "objects"))
            CHECK_MESSAGE(e.path().filename().string().find("~tmp~") == std::string::npos,
                          e.path());
    };
    struct loss {
        const char* what;
        std::string key;
        std::string tmp;                 // named by the record
        std::optional<std::string> left; // what the power loss left at `leftover`
        fs::path leftover;               // (relative to objects/)
        fs::path file;                   // the key's body (relative to objects/)
    };
    const loss cases[] = {
        {"a replacing write: temp file gone, the old body in place",
         "d/k",
         "k~tmp~feed",
         std::nullopt,
         {},
         "d~/k"},
        {"a replacing write: the temp file torn", "d/k", "k~tmp~feed", "new", "d~/k~tmp~feed",
         "d~/k"},
        {"a new key written in place: the file gone", "d/new", "", std::nullopt, {}, "d~/new"},
        {"a new key written in place: the file empty (its data never reached the disk)", "d/new",
         "", "", "d~/new", "d~/new"},
        {"a new key in a directory that is gone too", "e/f/new", "", std::nullopt, {}, "e~/f~/new"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.what);
        temp_dir copy; // each case starts from the same committed "old" state
        fs::copy(dir.path, copy.path, fs::copy_options::recursive);
        if (c.left)
            write_file(copy.path / "objects" / c.leftover, *c.left);
        append_file(copy.path / "journal", line_for(c.key, c.tmp));
        check_restored(copy.path, c.key, copy.path / "objects" / c.file);
        auto s = open_ok(io, copy.path); // and the snapshot kept the restored state
        CHECK(run(io, s->get(c.key, true)).body == body);
    }
}

TEST_CASE("journal compaction keeps everything and shrinks the journal") {
    temp_dir dir;
    net::io_context io;
    detail::set_compaction_threshold_for_tests(1);
    {
        auto s = open_ok(io, dir.path);
        for (int i = 0; i < 200; ++i) {
            auto k = "key" + std::to_string(i % 20);
            REQUIRE(run(io, s->put(put_req(k, k, i, "body" + std::to_string(i)))).error ==
                    errc::ok);
        }
        REQUIRE(run(io, s->remove(del_req("key0", "key0", 1000))).error == errc::ok);
    }
    detail::set_compaction_threshold_for_tests(0);
    std::string journal = read_file(dir.path / "journal");
    auto parsed = detail::parse_journal(journal);
    REQUIRE_FALSE(parsed.records.empty());
    CHECK(parsed.records[0].type == detail::record_type::verified);
    CHECK(parsed.records.size() < 100); // 201 writes, compacted to ~40 + a tail
    auto s = open_ok(io, dir.path);
    auto g = run(io, s->get("key7", true));
    CHECK(g.body == "body187");
    CHECK(g.version == 10);
    CHECK(run(io, s->get("key0", true)).error == errc::not_found);
    CHECK(run(io, s->read_fence("key0")).fence.token == 1000);
}

TEST_CASE("journaled bodies do not bring compaction forward, up to four times the threshold") {
    temp_dir dir;
    net::io_context io;
    detail::set_compaction_threshold_for_tests(64 * 1024);
    struct restore {
        ~restore() { detail::set_compaction_threshold_for_tests(0); }
    } restore_threshold;
    auto s = open_ok(io, dir.path);
    const std::string body(2000, 'b'); // journaled: a record is ~2.1 KB, ~100 B without it
    auto snapshot_count = [&] {
        auto parsed = detail::parse_journal(read_file(dir.path / "journal"));
        REQUIRE_FALSE(parsed.records.empty());
        REQUIRE(parsed.records[0].type == detail::record_type::verified);
        return std::pair(parsed.records[0].count, parsed.records.size());
    };
    // ~126 KB of journal, past the threshold, but ~6 KB of it records: no snapshot yet
    // (the journal is still the startup one: an empty snapshot and 60 records).
    for (int i = 0; i < 60; ++i)
        REQUIRE(run(io, s->put(put_req("k" + std::to_string(i), "L", i + 1, body))).error ==
                errc::ok);
    CHECK(snapshot_count() == std::pair<std::uint64_t, std::size_t>(0, 61));
    // Past four times the threshold (256 KiB) in all: compacted.
    for (int i = 60; i < 140; ++i)
        REQUIRE(run(io, s->put(put_req("k" + std::to_string(i), "L", i + 1, body))).error ==
                errc::ok);
    CHECK(snapshot_count().first > 100);
    s.reset();
    s = open_ok(io, dir.path);
    CHECK(run(io, s->get("k139", true)).body == body);
    CHECK(run(io, s->read_fence("L")).fence.token == 140);
}

// Kills a child process at each named step of a write (FK_FAILPOINTS builds only) and
// checks what a restart finds: the old or the new version whole, never a mix, the fence
// consistent with it, no temp files left.
TEST_CASE("kill -9 at every step of a write") {
    // Without failpoints nothing would be killed: fail rather than pass having checked nothing.
    REQUIRE_MESSAGE(detail::failpoints_compiled(),
                    "built without -DFK_FAILPOINTS=ON (scripts/test.sh turns it on)");
    struct point {
        const char* name;
        bool committed; // the journal record exists (in the page cache at least)
    };
    const point points[] = {{"before_body_fsync", false},    {"after_body_fsync", false},
                            {"before_journal_write", false}, {"after_journal_write", true},
                            {"after_journal_sync", true},    {"after_rename", true},
                            {"before_reply", true}};
    // An existing key's new body goes through a temp file and a rename; a new key's body
    // is written in place (fresh).
    for (const bool fresh : {false, true})
        for (const auto flush : {fk::config::file_flush::syncfs, fk::config::file_flush::fsync})
            for (const auto& pt : points) {
                CAPTURE(fresh);
                CAPTURE(flush == fk::config::file_flush::syncfs ? "syncfs" : "fsync");
                const std::string point_name = pt.name;
                CAPTURE(point_name);
                const std::string key = fresh ? "d/new" : "d/k";
                temp_dir dir;
                {
                    net::io_context io;
                    auto s = open_ok(io, dir.path);
                    REQUIRE(run(io, s->put(put_req("d/k", "L", 1, "old"))).error == errc::ok);
                }
                const int status = status_of_child_at(pt.name, [&] {
                    net::io_context io;
                    file_store_options opts;
                    opts.flush = flush;
                    auto r = open_file_store(io, dir.path.string(), opts);
                    if (auto* s = std::get_if<std::unique_ptr<store>>(&r))
                        run(io, (*s)->put(put_req(key, "L", 2, "new body")));
                });
                REQUIRE(WIFSIGNALED(status));
                CHECK(WTERMSIG(status) == SIGKILL);

                net::io_context io;
                auto s = open_ok(io, dir.path);
                auto g = run(io, s->get(key, true));
                CHECK(run(io, s->get("d/k", true)).error == errc::ok);
                if (pt.committed) {
                    REQUIRE(g.error == errc::ok);
                    CHECK(g.body == "new body");
                    CHECK(g.version == (fresh ? 1 : 2));
                    CHECK(run(io, s->read_fence("L")).fence.token == 2);
                    CHECK(run(io, s->put(put_req(key, "L", 1, "zombie"))).error ==
                          errc::stale_token);
                } else if (fresh) {
                    // The body written in place was never committed: gone, key absent.
                    CHECK(g.error == errc::not_found);
                    CHECK_FALSE(fs::exists(dir.path / "objects" / "d~" / "new"));
                    CHECK(run(io, s->read_fence("L")).fence.token == 1);
                    auto again = run(io, s->put(put_req(key, "L", 2, "again")));
                    CHECK(again.error == errc::ok);
                    CHECK(again.created);
                    CHECK(run(io, s->get(key, true)).body == "again");
                } else {
                    REQUIRE(g.error == errc::ok);
                    CHECK(g.body == "old");
                    CHECK(g.version == 1);
                    CHECK(run(io, s->read_fence("L")).fence.token == 1);
                }
                for (auto& e : fs::recursive_directory_iterator(dir.path / "objects"))
                    CHECK_MESSAGE(e.path().filename().string().find("~tmp~") == std::string::npos,
                                  e.path());
            }
}

TEST_CASE("kill -9 while replacing the journal with a snapshot") {
    // Without failpoints nothing would be killed: fail rather than pass having checked nothing.
    REQUIRE_MESSAGE(detail::failpoints_compiled(),
                    "built without -DFK_FAILPOINTS=ON (scripts/test.sh turns it on)");
    for (const char* name : {"snapshot_before_rename", "snapshot_after_rename"}) {
        CAPTURE(name);
        temp_dir dir;
        {
            net::io_context io;
            auto s = open_ok(io, dir.path);
            REQUIRE(run(io, s->put(put_req("k", "L", 4, "v"))).error == errc::ok);
        }
        const int status = status_of_child_at(name, [&] {
            net::io_context io;
            auto r = open_file_store(io, dir.path.string(), {});
        });
        CHECK(WIFSIGNALED(status));
        net::io_context io;
        auto s = open_ok(io, dir.path);
        CHECK(run(io, s->get("k", true)).body == "v");
        CHECK(run(io, s->read_fence("L")).fence.token == 4);
    }
}
