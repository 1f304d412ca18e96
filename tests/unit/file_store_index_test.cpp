// The file store's index (backends/file/detail/index.hpp) and the bodies' directories
// (objects_dir.hpp), each on its own, without the store around them.
#include "backends/file/detail/index.hpp"
#include "backends/file/detail/objects_dir.hpp"
#include "backends/file/detail/sys.hpp"
#include "file_store_test_util.hpp"

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <cerrno>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

using namespace fk::store::detail;
using fk::store::test::temp_dir;

namespace {

std::string path_in(const temp_dir& d) {
    return (d.path / index_file).string();
}

key_row live(std::string lock, std::int64_t version, fk::fence::token_t token) {
    key_row k;
    k.exists = true;
    k.version = version;
    k.lock = std::move(lock);
    k.token = token;
    k.ms = 1700000000000;
    k.size = 5;
    k.crc = 0xDEADBEEF;
    k.content_type = "text/plain";
    return k;
}

} // namespace

TEST_CASE("index: a writer's committed rows are what a reader sees; uncommitted ones are not") {
    temp_dir d;
    index_writer w;
    const auto opened = w.open(path_in(d), 1024);
    REQUIRE(opened.rc == index_ok);
    CHECK(opened.found_format == 0);
    CHECK(opened.clean); // a new file has nothing to sweep after
    index_reader r;
    REQUIRE(r.open(path_in(d)) == index_ok);

    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_fence("L", 7, 1700000000123) == index_ok);
    REQUIRE(w.put_key("k", live("L", 1, 7)) == index_ok);
    fence_row f;
    key_row k;
    // Inside the transaction the writer sees its own rows; the reader does not.
    CHECK(w.get_fence("L", f) == index_row);
    CHECK(r.get_fence("L", f) == index_done);
    CHECK(r.get_key("k", k) == index_done);
    REQUIRE(w.commit() == index_ok);

    REQUIRE(r.get_fence("L", f) == index_row);
    CHECK(f.token == 7);
    CHECK(f.updated_ms == 1700000000123);
    REQUIRE(r.get_key("k", k) == index_row);
    CHECK(k.exists);
    CHECK(k.version == 1);
    CHECK(k.lock == "L");
    CHECK(k.size == 5);
    CHECK(k.crc == 0xDEADBEEF);
    CHECK(k.content_type == "text/plain");

    // A rolled-back transaction leaves nothing.
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_fence("L", 9, 1) == index_ok);
    w.rollback();
    REQUIRE(r.get_fence("L", f) == index_row);
    CHECK(f.token == 7);
}

TEST_CASE("index: a tombstone keeps only the version") {
    temp_dir d;
    index_writer w;
    REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_key("k", live("L", 4, 2)) == index_ok);
    REQUIRE(w.tombstone_key("k", 4) == index_ok);
    REQUIRE(w.commit() == index_ok);
    key_row k;
    REQUIRE(w.get_key("k", k) == index_row);
    CHECK_FALSE(k.exists);
    CHECK(k.version == 4);
    CHECK(k.lock.empty());
    CHECK(k.content_type.empty());
}

TEST_CASE("index: fence listings are bytewise, by prefix, after a lock, bounded") {
    temp_dir d;
    index_writer w;
    REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
    const std::vector<std::string> locks = {"a", "a/b", "a/c", "a\xC3\xA9", "ab", "b", "A"};
    REQUIRE(w.begin() == index_ok);
    for (std::size_t i = 0; i < locks.size(); ++i)
        REQUIRE(w.put_fence(locks[i], static_cast<fk::fence::token_t>(i + 1), 0) == index_ok);
    REQUIRE(w.commit() == index_ok);
    index_reader r;
    REQUIRE(r.open(path_in(d)) == index_ok);
    auto names = [&](std::string_view prefix, std::string_view after, std::size_t limit) {
        std::vector<std::pair<std::string, fence_row>> rows;
        REQUIRE(r.list_fences(prefix, after, limit, rows) == index_done);
        std::vector<std::string> out;
        for (auto& [lock, f] : rows)
            out.push_back(lock);
        return out;
    };
    // Bytewise: 'A' (0x41) < 'a' < "a/" (0x2F) < "ab" (0x62) < "a\xC3" < 'b'.
    CHECK(names("", "", 100) ==
          std::vector<std::string>{"A", "a", "a/b", "a/c", "ab", "a\xC3\xA9", "b"});
    CHECK(names("a", "", 100) == std::vector<std::string>{"a", "a/b", "a/c", "ab", "a\xC3\xA9"});
    CHECK(names("a/", "", 100) == std::vector<std::string>{"a/b", "a/c"});
    CHECK(names("a", "a/b", 2) == std::vector<std::string>{"a/c", "ab"});
    CHECK(names("zz", "", 100).empty());
}

TEST_CASE("index: redo rows are numbered in order and deleted through a seq") {
    temp_dir d;
    index_writer w;
    REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
    REQUIRE(w.begin() == index_ok);
    redo_row a{0, "k1", 1, false, "k1~tmp~x", std::string("body\0bytes", 10)};
    redo_row b{0, "k2", 3, true, "", std::nullopt};
    REQUIRE(w.add_redo(a) == index_ok);
    REQUIRE(w.add_redo(b) == index_ok);
    REQUIRE(w.commit() == index_ok);
    CHECK(a.seq < b.seq);
    std::vector<redo_row> rows;
    REQUIRE(w.redo_rows(rows) == index_ok);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].key == "k1");
    CHECK(rows[0].tmp == "k1~tmp~x");
    REQUIRE(rows[0].body);
    CHECK(*rows[0].body == std::string("body\0bytes", 10)); // binary-safe
    CHECK(rows[1].is_delete);
    CHECK_FALSE(rows[1].body);
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.delete_redo_through(a.seq) == index_ok);
    REQUIRE(w.commit() == index_ok);
    rows.clear();
    REQUIRE(w.redo_rows(rows) == index_ok);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].key == "k2");
}

TEST_CASE("index: redo seqs only grow, after the table was emptied and across a reopen") {
    // SQLite's rowid starts over at 1 in an empty table; the committer trims "through the
    // last flushed seq", which would then skip every new row (issue 54).
    temp_dir d;
    std::int64_t last = 0;
    {
        index_writer w;
        REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
        redo_row a{0, "k1", 1, false, "", std::nullopt};
        redo_row b{0, "k2", 1, false, "", std::nullopt};
        REQUIRE(w.begin() == index_ok);
        REQUIRE(w.add_redo(a) == index_ok);
        REQUIRE(w.add_redo(b) == index_ok);
        REQUIRE(w.commit() == index_ok);
        REQUIRE(w.begin() == index_ok);
        REQUIRE(w.delete_redo_through(b.seq) == index_ok);
        redo_row c{0, "k3", 1, false, "", std::nullopt};
        REQUIRE(w.add_redo(c) == index_ok); // in the same transaction as the delete
        REQUIRE(w.commit() == index_ok);
        CHECK(c.seq > b.seq);
        // A rolled-back row's seq is not handed out again.
        REQUIRE(w.begin() == index_ok);
        redo_row e{0, "k4", 1, false, "", std::nullopt};
        REQUIRE(w.add_redo(e) == index_ok);
        w.rollback();
        redo_row f{0, "k5", 1, false, "", std::nullopt};
        REQUIRE(w.begin() == index_ok);
        REQUIRE(w.add_redo(f) == index_ok);
        REQUIRE(w.commit() == index_ok);
        CHECK(f.seq > e.seq);
        last = f.seq;
    }
    index_writer w;
    REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
    redo_row g{0, "k6", 1, false, "", std::nullopt};
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.add_redo(g) == index_ok);
    REQUIRE(w.commit() == index_ok);
    CHECK(g.seq > last); // the table's max at open
}

TEST_CASE("index: the clean-stop mark and the format version survive a reopen") {
    temp_dir d;
    {
        index_writer w;
        REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
        REQUIRE(w.mark_clean(true) == index_ok);
    }
    {
        index_writer w;
        const auto r = w.open(path_in(d), 1024);
        REQUIRE(r.rc == index_ok);
        CHECK(r.found_format == index_format);
        CHECK(r.clean);
        // Open marks it "not cleanly stopped" until the next mark_clean(true).
    }
    index_writer w;
    const auto r = w.open(path_in(d), 1024);
    REQUIRE(r.rc == index_ok);
    CHECK_FALSE(r.clean);
}

TEST_CASE("index: a failed sync of the WAL fails the COMMIT, and the rows are not there") {
    temp_dir d;
    index_writer w;
    REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
    set_fsync_fault_for_tests([](sync_kind k) { return k == sync_kind::index ? EIO : 0; });
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_fence("L", 5, 0) == index_ok);
    const int rc = w.commit();
    set_fsync_fault_for_tests(nullptr);
    CHECK(rc != index_ok);
    CHECK(w.last_error().find("COMMIT") != std::string::npos);
    fence_row f;
    CHECK(w.get_fence("L", f) == index_done);
}

TEST_CASE("index: build_index writes a complete file that the writer opens as clean") {
    temp_dir d;
    std::string error;
    key_row tomb;
    tomb.version = 6;
    REQUIRE(build_index(path_in(d), {{"L", {9, 123}}}, {{"k", live("L", 2, 9)}, {"gone", tomb}},
                        error) == index_ok);
    CHECK(error.empty());
    CHECK_FALSE(std::filesystem::exists(d.path / "index.db-journal"));
    index_writer w;
    const auto r = w.open(path_in(d), 1024);
    REQUIRE(r.rc == index_ok);
    CHECK(r.found_format == index_format);
    CHECK(r.clean);
    key_row k;
    REQUIRE(w.get_key("gone", k) == index_row);
    CHECK_FALSE(k.exists);
    CHECK(k.version == 6);
    fence_row f;
    REQUIRE(w.get_fence("L", f) == index_row);
    CHECK(f.token == 9);
}

namespace {

// Format 1 exactly as fencekeeper wrote it before the idempotency table (the schema of
// 0.2's first SQLite index), with a fence and a key in it; with `format_2`, plus the
// idempotency table and its index and one record (format 2, before fence floors).
void write_old_format(const std::string& path, bool format_2 = false) {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    const char* format_1 = R"sql(
PRAGMA journal_mode=WAL;
BEGIN;
CREATE TABLE fences (lock TEXT PRIMARY KEY, token INTEGER NOT NULL,
                     updated_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE keys (key TEXT PRIMARY KEY, version INTEGER NOT NULL, lock TEXT, token INTEGER,
                   ms INTEGER, size INTEGER, crc INTEGER, content_type TEXT) WITHOUT ROWID;
CREATE TABLE redo (seq INTEGER PRIMARY KEY, key TEXT NOT NULL, version INTEGER NOT NULL,
                   is_delete INTEGER NOT NULL, tmp TEXT, body BLOB);
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
INSERT INTO fences VALUES ('L', 9, 123);
INSERT INTO keys VALUES ('k', 2, 'L', 9, 123, 5, 3735928559, 'text/plain');
INSERT INTO meta VALUES ('clean', '1');
PRAGMA user_version = 1;
)sql";
    const char* format_2_adds = R"sql(
CREATE TABLE idempotency (scope TEXT NOT NULL, key TEXT NOT NULL, fingerprint BLOB NOT NULL,
                          created INTEGER NOT NULL, version INTEGER NOT NULL,
                          token INTEGER NOT NULL, committed_ms INTEGER NOT NULL,
                          PRIMARY KEY (scope, key)) WITHOUT ROWID;
CREATE INDEX idempotency_expiry ON idempotency (committed_ms);
INSERT INTO idempotency VALUES ('', 'old', x'00', 1, 2, 9, 5000);
PRAGMA user_version = 2;
)sql";
    const std::string sql = std::string(format_1) + (format_2 ? format_2_adds : "") + "COMMIT;";
    char* msg = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg);
    const std::string text = msg ? msg : "";
    sqlite3_free(msg);
    sqlite3_close(db);
    REQUIRE_MESSAGE(rc == SQLITE_OK, text);
}

std::string scalar(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK);
    std::string out;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
        out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
}

idem_row record(char fingerprint, std::int64_t committed_ms) {
    idem_row r;
    r.fingerprint = std::string(32, fingerprint);
    r.created = true;
    r.version = 3;
    r.token = 7;
    r.committed_ms = committed_ms;
    return r;
}

} // namespace

TEST_CASE("index: a format-1 index is upgraded to format 3 in place, its rows kept") {
    static_assert(index_format == 3);
    temp_dir d;
    write_old_format(path_in(d));
    {
        index_writer w;
        const auto r = w.open(path_in(d), 1024);
        REQUIRE(r.rc == index_ok);
        CHECK(r.found_format == 1);
        CHECK_FALSE(r.newer);
        CHECK(r.clean);
        fence_row f;
        REQUIRE(w.get_fence("L", f) == index_row);
        CHECK(f.token == 9);
        key_row k;
        REQUIRE(w.get_key("k", k) == index_row);
        CHECK(k.version == 2);
        CHECK(k.crc == 0xDEADBEEF);
        // The new table works.
        REQUIRE(w.begin() == index_ok);
        REQUIRE(w.put_idem("", "retry-1", record('a', 1000)) == index_ok);
        REQUIRE(w.commit() == index_ok);
    }
    CHECK(scalar(path_in(d), "PRAGMA user_version") == "3");
    CHECK(scalar(path_in(d), "SELECT count(*) FROM sqlite_master WHERE name IN "
                             "('idempotency', 'idempotency_expiry', 'floors')") == "3");
    index_writer w;
    const auto again = w.open(path_in(d), 1024);
    REQUIRE(again.rc == index_ok);
    CHECK(again.found_format == 3);
    idem_row got;
    CHECK(w.get_idem("", "retry-1", 0, got) == index_row);
}

TEST_CASE("index: a format-2 index is upgraded to format 3 in place: rows and records kept, "
          "floors added") {
    temp_dir d;
    write_old_format(path_in(d), true);
    {
        index_writer w;
        const auto r = w.open(path_in(d), 1024);
        REQUIRE(r.rc == index_ok);
        CHECK(r.found_format == 2);
        CHECK(r.clean);
        fence_row f;
        REQUIRE(w.get_fence("L", f) == index_row);
        CHECK(f.token == 9);
        key_row k;
        REQUIRE(w.get_key("k", k) == index_row);
        CHECK(k.version == 2);
        idem_row rec;
        REQUIRE(w.get_idem("", "old", 0, rec) == index_row);
        CHECK(rec.token == 9);
        std::vector<fk::fence::floor_entry> floors;
        REQUIRE(w.list_floors(floors) == index_done);
        CHECK(floors.empty());
        REQUIRE(w.begin() == index_ok);
        REQUIRE(w.put_floor("L", 20, 1000) == index_ok);
        REQUIRE(w.commit() == index_ok);
    }
    CHECK(scalar(path_in(d), "PRAGMA user_version") == "3");
    CHECK(scalar(path_in(d), "SELECT token FROM floors WHERE prefix = 'L'") == "20");
    index_writer w;
    const auto again = w.open(path_in(d), 1024);
    REQUIRE(again.rc == index_ok);
    CHECK(again.found_format == 3);
}

TEST_CASE("index: build_index (the 0.1 import) writes format 3 directly") {
    temp_dir d;
    std::string error;
    REQUIRE(build_index(path_in(d), {{"L", {9, 123}}}, {}, error) == index_ok);
    // Read before any index_writer opens (and would upgrade) it.
    CHECK(scalar(path_in(d), "PRAGMA user_version") == "3");
    CHECK(scalar(path_in(d), "SELECT count(*) FROM sqlite_master WHERE name IN "
                             "('idempotency', 'idempotency_expiry', 'floors')") == "3");
    CHECK(scalar(path_in(d), "SELECT count(*) FROM floors") == "0");
}

TEST_CASE("index: fence floors: one row per prefix (\"\" too), listed bytewise, committed only") {
    temp_dir d;
    index_writer w;
    REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
    index_reader r;
    REQUIRE(r.open(path_in(d)) == index_ok);
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_floor("b", 1, 10) == index_ok);
    REQUIRE(w.put_floor("", 2, 11) == index_ok);
    REQUIRE(w.put_floor(std::string_view(), 3, 12) == index_ok); // the empty prefix again
    REQUIRE(w.put_floor("a\xC3\xA9", 4, 13) == index_ok);
    REQUIRE(w.put_floor("ab", 5, 14) == index_ok);
    std::vector<fk::fence::floor_entry> seen;
    REQUIRE(r.list_floors(seen) == index_done);
    CHECK(seen.empty()); // not committed yet
    REQUIRE(w.commit() == index_ok);
    REQUIRE(r.list_floors(seen) == index_done);
    REQUIRE(seen.size() == 4);
    CHECK(seen[0].prefix.empty());
    CHECK(seen[0].token == 3);
    CHECK(seen[0].updated_at_ms == 12);
    CHECK(seen[1].prefix == "ab");
    CHECK(seen[2].prefix == "a\xC3\xA9");
    CHECK(seen[3].prefix == "b");
    CHECK(seen[3].token == 1);
}

TEST_CASE("index: idempotency records, their expiry boundary and bounded expiry steps") {
    temp_dir d;
    index_writer w;
    REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_idem("", "k", record('a', 5000)) == index_ok);
    REQUIRE(w.put_idem("s", "k", record('b', 5000)) == index_ok); // another scope
    REQUIRE(w.commit() == index_ok);
    index_reader r;
    REQUIRE(r.open(path_in(d)) == index_ok);
    idem_row got;
    REQUIRE(r.get_idem("", "k", 4999, got) == index_row);
    CHECK(got.fingerprint == std::string(32, 'a'));
    CHECK(got.created);
    CHECK(got.version == 3);
    CHECK(got.token == 7);
    CHECK(got.committed_ms == 5000);
    REQUIRE(r.get_idem("s", "k", 4999, got) == index_row);
    CHECK(got.fingerprint == std::string(32, 'b'));
    // Committed at or before the bound: expired, absent.
    CHECK(r.get_idem("", "k", 5000, got) == index_done);
    CHECK(r.get_idem("", "nope", 0, got) == index_done);
    // A new record replaces an expired one under the same key.
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_idem("", "k", record('c', 9000)) == index_ok);
    REQUIRE(w.commit() == index_ok);
    REQUIRE(r.get_idem("", "k", 5000, got) == index_row);
    CHECK(got.fingerprint == std::string(32, 'c'));

    // 2,500 expired records and 10 live ones: steps of at most the limit, oldest first.
    REQUIRE(w.begin() == index_ok);
    for (int i = 0; i < 2500; ++i)
        REQUIRE(w.put_idem("", "old" + std::to_string(i), record('o', 100 + i)) == index_ok);
    for (int i = 0; i < 10; ++i)
        REQUIRE(w.put_idem("", "new" + std::to_string(i), record('n', 20000)) == index_ok);
    REQUIRE(w.commit() == index_ok);
    std::vector<int> steps;
    for (;;) {
        int deleted = -1;
        REQUIRE(w.begin() == index_ok);
        REQUIRE(w.expire_idem(10000, 1000, deleted) == index_ok);
        REQUIRE(w.commit() == index_ok);
        steps.push_back(deleted);
        if (deleted == 0)
            break;
    }
    // The records at 5000 ("s"/"k") and 9000 (""/"k") went with the old ones.
    CHECK(steps == std::vector<int>{1000, 1000, 502, 0});
    CHECK(r.get_idem("", "old2499", 0, got) == index_done);
    CHECK(r.get_idem("", "k", 0, got) == index_done);
    for (int i = 0; i < 10; ++i)
        CHECK(r.get_idem("", "new" + std::to_string(i), 10000, got) == index_row);
}

TEST_CASE("objects_dir: directories are created as needed and reclaimed only when empty") {
    temp_dir d;
    const int root = ::open(d.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(root >= 0);
    objects_dir objects;
    int sync_failures = 0;
    REQUIRE(objects.open(root, [&](std::string_view, int) { ++sync_failures; }) == 0);
    auto ab = *object_path_for("a/b/c");
    auto ax = *object_path_for("a/x");
    std::shared_ptr<unique_fd> dir;
    CHECK(objects.open_dir(ab, false, dir) == ENOENT);
    REQUIRE(objects.open_dir(ab, true, dir) == 0);
    REQUIRE(objects.open_dir(ax, true, dir) == 0);
    const int fd = ::openat(dir->get(), ax.file.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    REQUIRE(fd >= 0);
    ::close(fd);
    CHECK(std::filesystem::is_directory(d.path / "objects" / "a~" / "b~"));
    // a~/b~ is empty: removed; a~ still holds x: kept.
    objects.reclaim_empty(ab);
    CHECK_FALSE(std::filesystem::exists(d.path / "objects" / "a~" / "b~"));
    CHECK(std::filesystem::exists(d.path / "objects" / "a~" / "x"));
    // And created again when needed (the set of known directories forgot it).
    REQUIRE(objects.open_dir(ab, true, dir) == 0);
    CHECK(std::filesystem::is_directory(d.path / "objects" / "a~" / "b~"));
    // A failed fsync of a new directory's parent is reported, and the open fails.
    set_fsync_fault_for_tests([](sync_kind k) { return k == sync_kind::directory ? EIO : 0; });
    CHECK(objects.open_dir(*object_path_for("n/m"), true, dir) == EIO);
    set_fsync_fault_for_tests(nullptr);
    CHECK(sync_failures == 1);
    ::close(root);
}

TEST_CASE("objects_dir: a budget bounds the directories one call makes, and made_from says "
          "which ones to take back") {
    temp_dir d;
    const int root = ::open(d.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(root >= 0);
    objects_dir objects;
    REQUIRE(objects.open(root, [](std::string_view, int) {}) == 0);
    std::shared_ptr<unique_fd> dir;
    // a~ exists already: only b~ … f~ are new.
    REQUIRE(objects.open_dir(*object_path_for("a/x"), true, dir) == 0);
    std::size_t made_from = std::string::npos;
    REQUIRE(objects.open_dir(*object_path_for("a/y"), true, dir, &made_from) == 0);
    CHECK(made_from == std::string::npos);
    const auto deep = *object_path_for("a/b/c/d/e/f/k");
    std::size_t budget = 2;
    CHECK(objects.open_dir(deep, true, dir, &made_from, &budget) == objects_dir::over_budget);
    CHECK(budget == 0);
    CHECK(made_from == 1); // b~ and c~ made, then it stopped
    CHECK(std::filesystem::is_directory(d.path / "objects" / "a~" / "b~" / "c~"));
    CHECK_FALSE(std::filesystem::exists(d.path / "objects" / "a~" / "b~" / "c~" / "d~"));
    // Without a budget it goes on from there; made_from stays the outermost one made.
    REQUIRE(objects.open_dir(deep, true, dir, &made_from) == 0);
    CHECK(made_from == 1);
    // Taking back what was made: b~ … f~ go, a~ (there before) stays.
    objects.reclaim_empty(deep, deep.dirs.size() - made_from);
    CHECK_FALSE(std::filesystem::exists(d.path / "objects" / "a~" / "b~"));
    CHECK(std::filesystem::is_directory(d.path / "objects" / "a~"));
    // A directory another write staged into stays, and so does everything above it.
    REQUIRE(objects.open_dir(deep, true, dir) == 0);
    const int fd = ::openat(dir->get(), "k", O_WRONLY | O_CREAT | O_EXCL, 0644);
    REQUIRE(fd >= 0);
    ::close(fd);
    objects.reclaim_empty(deep, 5);
    CHECK(std::filesystem::exists(d.path / "objects" / "a~" / "b~" / "c~" / "d~" / "e~" / "f~" /
                                  "k"));
    // 300 levels deep, removed whole (two descriptors at a time, through "..").
    std::string key;
    for (int i = 0; i < 300; ++i)
        key += "z/";
    key += "k";
    const auto z = *object_path_for(key);
    made_from = std::string::npos;
    REQUIRE(objects.open_dir(z, true, dir, &made_from) == 0);
    CHECK(made_from == 0);
    dir.reset();
    objects.reclaim_empty(z, z.dirs.size() - made_from);
    CHECK_FALSE(std::filesystem::exists(d.path / "objects" / "z~"));
    ::close(root);
}

TEST_CASE("index: the floors over a lock, read in one snapshot with its fence") {
    temp_dir d;
    index_writer w;
    REQUIRE(w.open(path_in(d), 1024).rc == index_ok);
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_fence("jobs/a", 3, 1) == index_ok);
    for (const char* p : {"", "j", "jobs/", "jobs/a", "jobs/ab", "jobs/b", "k"})
        REQUIRE(w.put_floor(p, 10, 1) == index_ok);
    REQUIRE(w.commit() == index_ok);
    index_reader r;
    REQUIRE(r.open(path_in(d)) == index_ok);
    auto over = [&](std::string_view lock) {
        std::vector<fk::fence::floor_entry> rows;
        REQUIRE(r.floors_over(lock, rows) == index_done);
        std::vector<std::string> out;
        for (auto& f : rows)
            out.push_back(f.prefix);
        return out;
    };
    CHECK(over("jobs/a") == std::vector<std::string>{"", "j", "jobs/", "jobs/a"});
    CHECK(over("x") == std::vector<std::string>{""});

    // Inside a read transaction, a floor and a fence committed meanwhile are not seen.
    REQUIRE(r.begin_read() == index_ok);
    fence_row f;
    REQUIRE(r.get_fence("jobs/a", f) == index_row);
    REQUIRE(w.begin() == index_ok);
    REQUIRE(w.put_fence("jobs/a", 20, 2) == index_ok);
    REQUIRE(w.put_floor("jobs/a/", 30, 2) == index_ok);
    REQUIRE(w.put_floor("jobs", 40, 2) == index_ok);
    REQUIRE(w.commit() == index_ok);
    REQUIRE(r.get_fence("jobs/a", f) == index_row);
    CHECK(f.token == 3);
    CHECK(over("jobs/a").size() == 4);
    r.end_read();
    REQUIRE(r.get_fence("jobs/a", f) == index_row);
    CHECK(f.token == 20);
    CHECK(over("jobs/a") == std::vector<std::string>{"", "j", "jobs", "jobs/", "jobs/a"});
}
