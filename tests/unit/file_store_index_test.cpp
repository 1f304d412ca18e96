// The file store's index (backends/file/detail/index.hpp) and the bodies' directories
// (objects_dir.hpp), each on its own, without the store around them.
#include "backends/file/detail/index.hpp"
#include "backends/file/detail/objects_dir.hpp"
#include "backends/file/detail/sys.hpp"
#include "file_store_test_util.hpp"

#include <doctest/doctest.h>

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
