#include "backends/file/detail/legacy_import.hpp"

#include "backends/file/detail/crc32c.hpp"
#include "backends/file/detail/index.hpp"
#include "backends/file/detail/key_path.hpp"
#include "backends/file/detail/legacy_journal.hpp"
#include "backends/file/detail/sys.hpp"

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace fk::store;
using namespace fk::store::detail;
namespace fs = std::filesystem;

namespace {

void write_file(const fs::path& p, const std::string& data) {
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << data;
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// Every "~tmp~" file left under `dir`.
std::vector<std::string> temp_files_under(const fs::path& dir) {
    std::vector<std::string> out;
    for (auto& e : fs::recursive_directory_iterator(dir))
        if (e.path().filename().string().find("~tmp~") != std::string::npos)
            out.push_back(e.path().string());
    return out;
}

// A 0.1 data directory: ROOT/objects with bodies at their key paths, and a journal made of
// the records the test adds.
struct legacy_root {
    fs::path path;
    unique_fd root_fd;
    unique_fd objects_fd;
    std::string journal;

    legacy_root() {
        std::string tmpl = (fs::temp_directory_path() / "fk-import-XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
        fs::create_directory(path / "objects");
        root_fd.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        objects_fd.reset(::open((path / "objects").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        REQUIRE(root_fd);
        REQUIRE(objects_fd);
    }
    ~legacy_root() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    legacy_root(const legacy_root&) = delete;
    legacy_root& operator=(const legacy_root&) = delete;

    fs::path dir_of(const std::string& key) const {
        auto p = object_path_for(key);
        REQUIRE(p);
        fs::path d = path / "objects";
        for (const auto& name : p->dirs)
            d /= name;
        return d;
    }
    fs::path body_path(const std::string& key) const {
        return dir_of(key) / object_path_for(key)->file;
    }
    void body(const std::string& key, const std::string& data) const {
        write_file(body_path(key), data);
    }
    void tmp(const std::string& key, const std::string& name, const std::string& data) const {
        write_file(dir_of(key) / name, data);
    }
    void add(const legacy::record& r) { legacy::append_record(journal, r); }
    void save() const { write_file(path / "journal", journal); }

    std::optional<open_error> convert(legacy_import_stats& stats) const {
        return import_legacy_journal(path.string(), root_fd.get(), objects_fd.get(), &stats);
    }
    legacy_import_stats convert_ok() const {
        legacy_import_stats stats;
        if (auto err = convert(stats))
            FAIL("import_legacy_journal failed: " << err->message);
        return stats;
    }
};

legacy::record put(const std::string& key, const std::string& lock, fk::fence::token_t token,
                   std::int64_t version, const std::string& body, const std::string& tmp = "",
                   const std::string& content_type = "text/plain") {
    auto r = legacy::put_record(key, lock, token, version, token * 1000);
    r.size = body.size();
    r.body_crc = crc32c(0, body);
    r.tmp = tmp;
    r.content_type = content_type;
    return r;
}

legacy::record with_body(legacy::record r, const std::string& body) {
    r.body = body;
    return r;
}

// The converted index, read through the index's own reader.
struct index_view {
    index_reader reader;

    explicit index_view(const fs::path& root) {
        REQUIRE(fs::exists(root / index_file));
        REQUIRE_MESSAGE(reader.open((root / index_file).string()) == SQLITE_OK,
                        reader.last_error());
    }
    std::optional<key_row> key(const std::string& k) {
        key_row row;
        int rc = reader.get_key(k, row);
        REQUIRE_MESSAGE((rc == SQLITE_ROW || rc == SQLITE_DONE), reader.last_error());
        return rc == SQLITE_ROW ? std::optional(row) : std::nullopt;
    }
    std::optional<fence_row> fence(const std::string& lock) {
        fence_row row;
        int rc = reader.get_fence(lock, row);
        REQUIRE_MESSAGE((rc == SQLITE_ROW || rc == SQLITE_DONE), reader.last_error());
        return rc == SQLITE_ROW ? std::optional(row) : std::nullopt;
    }
    std::vector<std::pair<std::string, fence_row>> fences() {
        std::vector<std::pair<std::string, fence_row>> out;
        int rc = reader.list_fences("", "", 1000, out);
        REQUIRE_MESSAGE((rc == SQLITE_DONE || rc == SQLITE_OK), reader.last_error());
        return out;
    }
    int user_version() {
        int v = -1;
        auto cb = [](void* out, int, char** vals, char**) {
            *static_cast<int*>(out) = std::atoi(vals[0]);
            return 0;
        };
        REQUIRE(sqlite3_exec(reader.handle(), "PRAGMA user_version", cb, &v, nullptr) == SQLITE_OK);
        return v;
    }
};

void check_fence(index_view& ix, const std::string& lock, fk::fence::token_t token,
                 std::int64_t ms) {
    CAPTURE(lock);
    auto f = ix.fence(lock);
    REQUIRE(f);
    CHECK(f->token == token);
    CHECK(f->updated_ms == ms);
}

void check_key(index_view& ix, const legacy_root& root, const std::string& key,
               const std::string& lock, fk::fence::token_t token, std::int64_t version,
               const std::string& body, const std::string& content_type = "text/plain") {
    CAPTURE(key);
    auto k = ix.key(key);
    REQUIRE(k);
    CHECK(k->exists);
    CHECK(k->version == version);
    CHECK(k->lock == lock);
    CHECK(k->token == token);
    CHECK(k->ms == token * 1000);
    CHECK(k->size == body.size());
    CHECK(k->crc == crc32c(0, body));
    CHECK(k->content_type == content_type);
    CHECK(read_file(root.body_path(key)) == body);
}

void check_tombstone(index_view& ix, const legacy_root& root, const std::string& key,
                     std::int64_t version) {
    CAPTURE(key);
    auto k = ix.key(key);
    REQUIRE(k);
    CHECK_FALSE(k->exists);
    CHECK(k->version == version);
    CHECK(k->lock.empty());
    CHECK(k->size == 0);
    CHECK_FALSE(fs::exists(root.body_path(key)));
}

// The journal is gone, kept as journal.retired with `text`, and nothing else is left over.
void check_retired(const legacy_root& root, const std::string& text) {
    CHECK_FALSE(fs::exists(root.path / "journal"));
    CHECK_FALSE(fs::exists(root.path / "journal.new"));
    CHECK(read_file(root.path / "journal.retired") == text);
    for (const char* name : {"index.db.new", "index.db.new-journal", "index.db-journal"})
        CHECK_MESSAGE(!fs::exists(root.path / name), name);
}

// Runs `body` in a forked child with FAILPOINT armed (it kills the child with SIGKILL when
// reached); a child that returns from `body` exits with status 3. The child's wait status.
template <typename Body> int status_of_child_at(const std::string& failpoint, Body body) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        set_failpoint_for_tests(failpoint);
        body();
        ::_exit(3); // the failpoint was not reached
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    return status;
}

// A journal that needs every kind of repair: a roll-forward, a journaled body to restore,
// a lost write to fall back from, a delete whose unlink was lost, and stray files.
void make_repairs_needed(legacy_root& root) {
    root.add(legacy::header_record(2));
    root.add(put("d/k", "L", 1, 1, "old"));
    root.add(put("e/gone", "L", 1, 1, "bye"));
    root.body("d/k", "old");
    root.body("e/gone", "bye");
    root.add(put("d/k", "L", 2, 2, "new body", "k~tmp~feed"));
    root.tmp("d/k", "k~tmp~feed", "new body");
    root.add(with_body(put("d/j", "L", 3, 1, "journaled"), "journaled"));
    root.add(put("d/lost", "L", 4, 1, "lost"));
    root.body("d/lost", "lost");
    root.add(put("d/lost", "L", 5, 2, "never written", "lost~tmp~aa"));
    root.add(legacy::del_record("e/gone", "L", 6, 2, 6000));
    root.tmp("d/k", "k~tmp~dead", "junk");
    root.body("d/orphan", "uncommitted");
    root.save();
}

void check_repaired(const legacy_root& root) {
    index_view ix(root.path);
    check_key(ix, root, "d/k", "L", 2, 2, "new body");
    check_key(ix, root, "d/j", "L", 3, 1, "journaled");
    check_key(ix, root, "d/lost", "L", 4, 1, "lost");
    check_tombstone(ix, root, "e/gone", 2);
    CHECK_FALSE(ix.key("d/orphan"));
    CHECK_FALSE(fs::exists(root.body_path("d/orphan")));
    check_fence(ix, "L", 6, 6000);
    CHECK(ix.fences().size() == 1);
    CHECK(temp_files_under(root.path / "objects").empty());
    check_retired(root, root.journal);
}

} // namespace

// --- the 0.1 journal format (moved here from file_store_layout_test.cpp) ---

TEST_CASE("legacy journal records round-trip, with hostile field bytes percent-encoded") {
    legacy::record p = legacy::put_record("k e/y%\n\x7F", "lock one", 42, 7, 1700000000000);
    p.size = 12;
    p.body_crc = 0xDEADBEEF;
    p.tmp = "y~tmp~1";
    p.content_type = ""; // an empty last field survives
    std::string text;
    legacy::append_record(text, legacy::header_record(3));
    legacy::append_record(text, p);
    legacy::append_record(text, legacy::fence_record("L", 9223372036854775807, 5));
    legacy::append_record(text, legacy::del_record("k", "L", 0, 3, 6));
    CHECK(std::count(text.begin(), text.end(), '\n') == 4);
    auto parsed = legacy::parse_journal(text);
    CHECK_FALSE(parsed.damaged);
    CHECK(parsed.valid_bytes == text.size());
    REQUIRE(parsed.records.size() == 4);
    CHECK(parsed.records[0].type == legacy::record_type::verified);
    CHECK(parsed.records[0].count == 3);
    const legacy::record& q = parsed.records[1];
    CHECK(q.type == legacy::record_type::put);
    CHECK(q.key == p.key);
    CHECK(q.lock == p.lock);
    CHECK(q.token == 42);
    CHECK(q.version == 7);
    CHECK(q.ms == 1700000000000);
    CHECK(q.size == 12);
    CHECK(q.body_crc == 0xDEADBEEF);
    CHECK(q.tmp == "y~tmp~1");
    CHECK(q.content_type.empty());
    CHECK_FALSE(q.body); // no body field: none journaled
    CHECK(parsed.records[2].token == 9223372036854775807);
    CHECK(parsed.records[3].type == legacy::record_type::del);
    CHECK(legacy::encode_field("a b%c") == "a%20b%25c");
    CHECK(legacy::decode_field("a%20b%25c") == "a b%c");
    CHECK_FALSE(legacy::decode_field("a%2"));
    CHECK_FALSE(legacy::decode_field("a%zz"));
}

TEST_CASE("legacy journal: a put record can carry its body, which must match its size and CRC") {
    auto record_with = [](std::string body, std::uint64_t size, std::uint32_t crc) {
        legacy::record p = legacy::put_record("k", "L", 1, 1, 5);
        p.size = size;
        p.body_crc = crc;
        p.content_type = "application/octet-stream";
        p.body = std::move(body);
        std::string text;
        legacy::append_record(text, p);
        return text;
    };
    for (const std::string& body :
         {std::string(), std::string("plain"), std::string("sp ace%\n\0\x7F\xFF", 11)}) {
        CAPTURE(body);
        auto parsed = legacy::parse_journal(record_with(body, body.size(), crc32c(0, body)));
        CHECK_FALSE(parsed.damaged);
        REQUIRE(parsed.records.size() == 1);
        REQUIRE(parsed.records[0].body);
        CHECK(*parsed.records[0].body == body);
        CHECK(parsed.records[0].content_type == "application/octet-stream");
    }
    // A record whose body disagrees with its own size or CRC is not intact.
    CHECK(legacy::parse_journal(record_with("abc", 4, crc32c(0, "abc"))).damaged);
    CHECK(legacy::parse_journal(record_with("abc", 3, crc32c(0, "abd"))).damaged);
}

TEST_CASE("legacy journal: a torn or corrupt tail stops replay; intact records after damage are "
          "flagged") {
    std::string good;
    legacy::append_record(good, legacy::fence_record("a", 1, 1));
    legacy::append_record(good, legacy::fence_record("b", 2, 2));
    std::string third;
    legacy::append_record(third, legacy::fence_record("c", 3, 3));

    SUBCASE("short last line") {
        auto parsed = legacy::parse_journal(good + third.substr(0, 10));
        CHECK(parsed.records.size() == 2);
        CHECK(parsed.valid_bytes == good.size());
        CHECK(parsed.damaged);
        CHECK_FALSE(parsed.intact_after_damage);
    }
    SUBCASE("zeros after the last record (power loss after the size grew)") {
        auto parsed = legacy::parse_journal(good + std::string(4096, '\0'));
        CHECK(parsed.records.size() == 2);
        CHECK(parsed.damaged);
        CHECK_FALSE(parsed.intact_after_damage);
    }
    SUBCASE("flipped bit in the last line") {
        std::string bad = third;
        bad[12] ^= 1;
        auto parsed = legacy::parse_journal(good + bad);
        CHECK(parsed.records.size() == 2);
        CHECK(parsed.damaged);
        CHECK_FALSE(parsed.intact_after_damage);
    }
    SUBCASE("damage in the middle") {
        std::string bad = good;
        bad[3] ^= 1;
        auto parsed = legacy::parse_journal(bad + third);
        CHECK(parsed.records.empty());
        CHECK(parsed.valid_bytes == 0);
        CHECK(parsed.intact_after_damage);
    }
}

// --- the conversion ---

TEST_CASE("import: without a journal there is nothing to convert") {
    legacy_root root;
    auto stats = root.convert_ok();
    CHECK_FALSE(stats.converted);
    CHECK_FALSE(stats.retired_only);
    CHECK_FALSE(fs::exists(root.path / index_file));
    CHECK_FALSE(fs::exists(root.path / "journal.retired"));
}

TEST_CASE("import: a snapshot and its tail become fences, keys and tombstones") {
    legacy_root root;
    const std::string long_key = std::string(300, 'x') + "/100% é/" + std::string(250, '%');
    // 0.1's compacted journal: one F per fence, one P or D per key (a D without lock).
    root.add(legacy::header_record(5));
    root.add(legacy::fence_record("L1", 10, 100));
    root.add(legacy::fence_record("only-fence", 7, 101));
    root.add(put("a/b", "L1", 10, 3, "bee", "", "application/x"));
    root.add(put("top", "L2", 4, 1, "top body"));
    root.add(legacy::del_record("gone", "", 0, 2, 103));
    root.body("a/b", "bee");
    root.body("top", "top body");
    // Records appended after it.
    root.add(legacy::fence_record("only-fence", 9, 200));
    root.add(legacy::fence_record("only-fence", 8, 201));                  // lower: changes nothing
    root.add(put("a/b", "L1", 12, 4, "bee4", "b~tmp~1", "application/y")); // renamed before
    root.body("a/b", "bee4");
    root.add(legacy::del_record("top", "L3", 5, 2, 5000)); // its unlink happened too
    fs::remove(root.body_path("top"));
    root.add(put("new key/100% é", "L2", 6, 1, std::string("bin\0ary", 7)));
    root.body("new key/100% é", std::string("bin\0ary", 7));
    root.add(put(long_key, "L5", 1, 1, "long"));
    root.body(long_key, "long");
    root.add(put("gone", "L5", 2, 3, "back")); // after its tombstone: version 3
    root.body("gone", "back");
    root.save();
    write_file(root.path / "journal.new", "an interrupted 0.1 snapshot");

    auto stats = root.convert_ok();
    CHECK(stats.converted);
    CHECK_FALSE(stats.retired_only);
    CHECK(stats.fences == 5);
    CHECK(stats.keys == 4);
    CHECK(stats.tombstones == 1);
    CHECK(stats.rolled_forward == 0);
    CHECK(stats.restored_from_journal == 0);
    CHECK(stats.fell_back == 0);
    CHECK(stats.temp_files == 0);
    CHECK(stats.uncommitted_bodies == 0);

    index_view ix(root.path);
    CHECK(ix.user_version() == index_format);
    check_fence(ix, "L1", 12, 12000);
    check_fence(ix, "L2", 6, 6000);
    check_fence(ix, "L3", 5, 5000);
    check_fence(ix, "L5", 2, 2000);
    check_fence(ix, "only-fence", 9, 200);
    std::vector<std::string> locks;
    for (const auto& [lock, row] : ix.fences())
        locks.push_back(lock);
    CHECK(locks == std::vector<std::string>{"L1", "L2", "L3", "L5", "only-fence"});

    check_key(ix, root, "a/b", "L1", 12, 4, "bee4", "application/y");
    check_key(ix, root, "new key/100% é", "L2", 6, 1, std::string("bin\0ary", 7));
    check_key(ix, root, long_key, "L5", 1, 1, "long");
    check_key(ix, root, "gone", "L5", 2, 3, "back");
    check_tombstone(ix, root, "top", 2);
    CHECK_FALSE(ix.key("a"));
    CHECK_FALSE(ix.key("never"));
    check_retired(root, root.journal);
}

TEST_CASE("import: a committed write whose rename did not happen is rolled forward") {
    legacy_root root;
    root.add(legacy::header_record(1));
    root.add(put("d/k", "L", 1, 1, "old"));
    root.body("d/k", "old");
    root.add(put("d/k", "L", 7, 2, "new body", "k~tmp~feed", "text/new"));
    root.tmp("d/k", "k~tmp~feed", "new body");
    root.save();

    auto stats = root.convert_ok();
    CHECK(stats.rolled_forward == 1);
    CHECK(stats.fell_back == 0);
    index_view ix(root.path);
    check_key(ix, root, "d/k", "L", 7, 2, "new body", "text/new");
    check_fence(ix, "L", 7, 7000);
    CHECK(temp_files_under(root.path / "objects").empty());
    check_retired(root, root.journal);
}

// A power loss can take a journaled body's file (written without a sync) while its
// committed record, which carries the body, survives: the conversion rewrites the file.
TEST_CASE("import: a committed write whose file a power loss took is restored from its record") {
    const std::string body = std::string("new\0body", 8);
    struct loss {
        const char* what;
        std::string key;
        std::string tmp;                 // named by the record
        std::optional<std::string> left; // what the power loss left at `leftover`
        std::string leftover;            // a temp file name in the key's directory, or ""
                                         // for the key's own body
    };
    const loss cases[] = {
        {"a replacing write: temp file gone, the old body in place", "d/k", "k~tmp~feed",
         std::nullopt, ""},
        {"a replacing write: the temp file torn", "d/k", "k~tmp~feed", "new", "k~tmp~feed"},
        {"a new key written in place: the file gone", "d/new", "", std::nullopt, ""},
        {"a new key written in place: the file empty (its data never reached the disk)", "d/new",
         "", "", ""},
        {"a new key in a directory that is gone too", "e/f/new", "", std::nullopt, ""},
    };
    for (const auto& c : cases) {
        CAPTURE(c.what);
        legacy_root root;
        root.add(legacy::header_record(1));
        root.add(put("d/k", "L", 1, 1, "old"));
        root.body("d/k", "old");
        if (c.left && c.leftover.empty())
            root.body(c.key, *c.left);
        else if (c.left)
            root.tmp(c.key, c.leftover, *c.left);
        root.add(
            with_body(put(c.key, "L", 7, c.key == "d/k" ? 2 : 1, body, c.tmp, "text/new"), body));
        root.save();

        auto stats = root.convert_ok();
        CHECK(stats.restored_from_journal == 1);
        CHECK(stats.fell_back == 0);
        index_view ix(root.path);
        check_key(ix, root, c.key, "L", 7, c.key == "d/k" ? 2 : 1, body, "text/new");
        check_fence(ix, "L", 7, 7000);
        CHECK(temp_files_under(root.path / "objects").empty());
        check_retired(root, root.journal);
    }
}

TEST_CASE("import: a write found nowhere on disk falls back to the key's previous record") {
    legacy_root root;
    root.add(legacy::header_record(1));
    root.add(put("d/k", "L", 1, 1, "old"));
    root.body("d/k", "old");

    SUBCASE("the previous body is there: it stays, the fence keeps the lost write's advance") {
        root.add(put("d/k", "L", 7, 2, "new body", "k~tmp~feed"));
        root.save();
        auto stats = root.convert_ok();
        CHECK(stats.fell_back == 1);
        index_view ix(root.path);
        check_key(ix, root, "d/k", "L", 1, 1, "old");
        check_fence(ix, "L", 7, 7000);
    }
    SUBCASE("the previous body is lost too: the key becomes a tombstone of the last version") {
        root.add(put("d/k", "L", 2, 2, "second")); // in place, but the file holds "old"
        root.add(put("d/k", "L", 3, 3, "third", "k~tmp~feed"));
        root.save();
        auto stats = root.convert_ok();
        CHECK(stats.fell_back == 1);
        CHECK(stats.uncommitted_bodies == 1); // the file matching neither is removed
        index_view ix(root.path);
        check_tombstone(ix, root, "d/k", 3);
        check_fence(ix, "L", 3, 3000);
    }
    SUBCASE("a new key whose in-place body is torn and has no copy: the key is absent") {
        root.add(put("d/new", "L2", 4, 1, "hello"));
        root.body("d/new", "hel");
        root.save();
        auto stats = root.convert_ok();
        CHECK(stats.fell_back == 1);
        CHECK(stats.uncommitted_bodies == 1);
        index_view ix(root.path);
        CHECK_FALSE(ix.key("d/new"));
        CHECK_FALSE(fs::exists(root.body_path("d/new")));
        check_fence(ix, "L2", 4, 4000);
        check_key(ix, root, "d/k", "L", 1, 1, "old");
    }
    check_retired(root, root.journal);
}

TEST_CASE("import: a committed delete whose unlink was lost removes the body") {
    legacy_root root;
    root.add(legacy::header_record(1));
    root.add(put("d/k", "L", 1, 1, "old"));
    root.body("d/k", "old");
    root.add(legacy::del_record("d/k", "L", 8, 2, 8000));
    root.save();
    auto stats = root.convert_ok();
    CHECK(stats.tombstones == 1);
    CHECK(stats.keys == 0);
    index_view ix(root.path);
    check_tombstone(ix, root, "d/k", 2);
    check_fence(ix, "L", 8, 8000);
    check_retired(root, root.journal);
}

TEST_CASE("import: a torn journal tail is dropped") {
    legacy_root root;
    root.add(put("k", "k", 3, 1, "v"));
    root.body("k", "v");
    std::string extra;
    legacy::append_record(extra, legacy::fence_record("torn", 50, 1));
    SUBCASE("short last line") {
        root.journal += extra.substr(0, extra.size() - 3);
    }
    SUBCASE("zeros after the last record") {
        root.journal += std::string(4096, '\0');
    }
    root.save();
    auto stats = root.convert_ok();
    CHECK(stats.fences == 1);
    index_view ix(root.path);
    check_key(ix, root, "k", "k", 3, 1, "v");
    CHECK_FALSE(ix.fence("torn"));
    check_retired(root, root.journal); // kept whole, torn tail included
}

TEST_CASE("import: damage followed by intact records refuses to convert, naming the offset") {
    legacy_root root;
    root.add(legacy::fence_record("a", 1, 1));
    const std::size_t offset = root.journal.size();
    root.add(legacy::fence_record("b", 2, 2));
    root.add(legacy::fence_record("c", 3, 3));
    root.journal[offset + 12] ^= 0x01; // inside the second record
    root.save();

    legacy_import_stats stats;
    auto err = root.convert(stats);
    REQUIRE(err);
    CHECK(err->exit_code == 1);
    CHECK(err->message.find("damaged at byte " + std::to_string(offset) + " ") !=
          std::string::npos);
    CHECK_FALSE(stats.converted);
    CHECK(read_file(root.path / "journal") == root.journal); // untouched, still authoritative
    CHECK_FALSE(fs::exists(root.path / index_file));
    CHECK_FALSE(fs::exists(root.path / "index.db.new"));
    CHECK_FALSE(fs::exists(root.path / "journal.retired"));
}

TEST_CASE("import: a snapshot header anywhere but first refuses to convert") {
    legacy_root root;
    root.add(legacy::fence_record("a", 1, 1));
    root.add(legacy::header_record(0));
    root.save();
    legacy_import_stats stats;
    auto err = root.convert(stats);
    REQUIRE(err);
    CHECK(err->exit_code == 1);
    CHECK(err->message.find("misplaced snapshot header") != std::string::npos);
    CHECK(fs::exists(root.path / "journal"));
    CHECK_FALSE(fs::exists(root.path / index_file));
}

TEST_CASE("import: stray temp files and uncommitted in-place bodies are removed") {
    legacy_root root;
    root.add(legacy::header_record(2));
    root.add(put("d/k", "d", 1, 1, "v"));
    root.add(legacy::del_record("t", "", 0, 4, 1));
    root.body("d/k", "v");
    root.tmp("x", "x~tmp~0123", "junk");
    root.tmp("d/k", "k~tmp~4567", "junk");
    root.body("d/orphan", "never committed");
    root.body("t", "a tombstone's body: never committed");
    write_file(root.path / "objects" / "%61", "a name the encoder never writes: left alone");
    root.save();

    auto stats = root.convert_ok();
    CHECK(stats.temp_files == 2);
    CHECK(stats.uncommitted_bodies == 2);
    CHECK(temp_files_under(root.path / "objects").empty());
    CHECK_FALSE(fs::exists(root.body_path("d/orphan")));
    CHECK(fs::exists(root.path / "objects" / "%61"));
    index_view ix(root.path);
    check_key(ix, root, "d/k", "d", 1, 1, "v");
    check_tombstone(ix, root, "t", 4);
    CHECK_FALSE(ix.key("d/orphan"));
}

TEST_CASE("import: with index.db already there, only the journal is retired") {
    legacy_root root;
    root.add(put("k", "L", 1, 1, "v"));
    root.body("k", "v");
    root.save();
    root.convert_ok();
    const std::string index_bytes = read_file(root.path / index_file);

    // As if the first conversion had stopped right after its rename: the journal is still
    // there (and one that would convert differently, to show it is not read again).
    legacy_root other;
    other.add(legacy::fence_record("not-converted", 99, 1));
    fs::remove(root.path / "journal.retired");
    write_file(root.path / "journal", other.journal);
    write_file(root.path / "journal.new", "junk");

    auto stats = root.convert_ok();
    CHECK(stats.retired_only);
    CHECK_FALSE(stats.converted);
    CHECK(read_file(root.path / index_file) == index_bytes);
    check_retired(root, other.journal);
    index_view ix(root.path);
    CHECK_FALSE(ix.fence("not-converted"));
    check_key(ix, root, "k", "L", 1, 1, "v");
}

TEST_CASE("import: a journal begun after a completed conversion is refused, not dropped") {
    legacy_root root;
    root.add(put("k", "L", 1, 1, "v"));
    root.body("k", "v");
    root.save();
    root.convert_ok();
    // A 0.1 binary started on the converted directory: it found no journal, began a new
    // one and acknowledged a fence advance.
    legacy_root other;
    other.add(legacy::header_record(0));
    other.add(legacy::fence_record("L", 9, 1));
    write_file(root.path / "journal", other.journal);

    legacy_import_stats stats;
    auto err = root.convert(stats);
    REQUIRE(err);
    CHECK(err->exit_code == 1);
    CHECK(err->message.find("written after the conversion") != std::string::npos);
    CHECK_FALSE(stats.retired_only);
    CHECK(read_file(root.path / "journal") == other.journal);
    CHECK(read_file(root.path / "journal.retired") == root.journal);
}

TEST_CASE("import: a leftover index.db.new (and SQLite's files beside it) is replaced") {
    legacy_root root;
    root.add(put("k", "L", 1, 1, "v"));
    root.body("k", "v");
    root.save();
    write_file(root.path / "index.db.new", "half a database from an interrupted conversion");
    write_file(root.path / "index.db.new-journal", "its rollback journal");
    write_file(root.path / "index.db-wal", "a stray WAL with no database");
    auto stats = root.convert_ok();
    CHECK(stats.converted);
    CHECK_FALSE(fs::exists(root.path / "index.db-wal"));
    index_view ix(root.path);
    CHECK(ix.user_version() == index_format);
    check_key(ix, root, "k", "L", 1, 1, "v");
    check_retired(root, root.journal);
}

TEST_CASE("import: running it again after a conversion changes nothing") {
    legacy_root root;
    make_repairs_needed(root);
    auto first = root.convert_ok();
    CHECK(first.converted);
    CHECK(first.rolled_forward == 1);
    CHECK(first.restored_from_journal == 1);
    CHECK(first.fell_back == 1);
    CHECK(first.temp_files == 1);
    CHECK(first.uncommitted_bodies == 1);
    check_repaired(root);
    const std::string index_bytes = read_file(root.path / index_file);

    auto second = root.convert_ok();
    CHECK_FALSE(second.converted);
    CHECK_FALSE(second.retired_only);
    CHECK(read_file(root.path / index_file) == index_bytes);
    check_repaired(root);
}

TEST_CASE("import: a failure before the rename leaves the journal authoritative") {
    legacy_root root;
    make_repairs_needed(root);

    SUBCASE("syncfs fails") {
        set_fsync_fault_for_tests([](sync_kind k) { return k == sync_kind::filesystem ? EIO : 0; });
        legacy_import_stats stats;
        auto err = root.convert(stats);
        set_fsync_fault_for_tests(nullptr);
        REQUIRE(err);
        CHECK(err->exit_code == 1);
        CHECK(err->message.find("syncfs") != std::string::npos);
    }
    SUBCASE("index.db.new cannot be removed") {
        fs::create_directories(root.path / "index.db.new" / "in-the-way");
        legacy_import_stats stats;
        auto err = root.convert(stats);
        REQUIRE(err);
        CHECK(err->exit_code == 1);
        CHECK(err->message.find("index.db.new") != std::string::npos);
        fs::remove_all(root.path / "index.db.new");
    }
    CHECK(read_file(root.path / "journal") == root.journal);
    CHECK_FALSE(fs::exists(root.path / index_file));
    CHECK_FALSE(fs::exists(root.path / "journal.retired"));
    auto stats = root.convert_ok(); // the next start converts
    CHECK(stats.converted);
    check_repaired(root);
}

TEST_CASE("import: a failed ROOT fsync after the rename stops; the next start retires") {
    legacy_root root;
    make_repairs_needed(root);
    set_fsync_fault_for_tests([](sync_kind k) { return k == sync_kind::directory ? EIO : 0; });
    legacy_import_stats stats;
    auto err = root.convert(stats);
    set_fsync_fault_for_tests(nullptr);
    REQUIRE(err);
    CHECK(err->exit_code == 1);
    CHECK(err->message.find("fsync of ROOT") != std::string::npos);
    CHECK(fs::exists(root.path / "journal"));
    CHECK(fs::exists(root.path / index_file));
    auto again = root.convert_ok();
    CHECK(again.retired_only);
    check_repaired(root);
}

TEST_CASE("import: kill -9 before and after the rename, then a restart converts") {
    // Without failpoints nothing would be killed: fail rather than pass having checked nothing.
    REQUIRE_MESSAGE(failpoints_compiled(),
                    "built without -DFK_FAILPOINTS=ON (scripts/test.sh turns it on)");
    for (const bool after : {false, true}) {
        const std::string name = after ? "import_after_rename" : "import_before_rename";
        CAPTURE(name);
        legacy_root root;
        make_repairs_needed(root);
        const int status = status_of_child_at(name, [&] {
            legacy_import_stats stats;
            (void)root.convert(stats);
        });
        REQUIRE(WIFSIGNALED(status));
        CHECK(WTERMSIG(status) == SIGKILL);
        // The child had repaired objects/ and written the index file, nothing more.
        CHECK(read_file(root.path / "journal") == root.journal);
        CHECK(fs::exists(root.path / (after ? "index.db" : "index.db.new")));
        CHECK_FALSE(fs::exists(root.path / (after ? "index.db.new" : "index.db")));

        auto stats = root.convert_ok();
        CHECK(stats.converted == !after);
        CHECK(stats.retired_only == after);
        if (!after) {
            // The replay found the repairs done: nothing left to roll forward or restore,
            // and the same decision for the lost write.
            CHECK(stats.rolled_forward == 0);
            CHECK(stats.restored_from_journal == 0);
            CHECK(stats.fell_back == 1);
        }
        check_repaired(root);
    }
}
