// The one-time conversion of a 0.1 journal directory into index.db (legacy_import.hpp).
// The replay rules are those of 0.1's recovery (docs/file-store.md of 0.1, "Recovery"),
// kept here verbatim in behaviour so that a converted store holds exactly what 0.1 would
// have served after a restart.

#include "backends/file/detail/legacy_import.hpp"

#include "backends/file/detail/crc32c.hpp"
#include "backends/file/detail/index.hpp"
#include "backends/file/detail/key_path.hpp"
#include "backends/file/detail/legacy_journal.hpp"
#include "backends/file/detail/sys.hpp"
#include "backends/log/logging.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fk::store::detail {

namespace {

using legacy::record;
using legacy::record_type;

constexpr const char* journal_name = "journal";
constexpr const char* journal_new_name = "journal.new"; // 0.1's snapshot in progress
constexpr const char* retired_name = "journal.retired";
constexpr const char* index_new_suffix = ".new";
// Files SQLite keeps beside a database. Stale ones of index.db (there is none yet, so they
// belong to no database) must not meet the file renamed to that name: a WAL with valid
// frames would be replayed into it.
constexpr const char* sqlite_side_files[] = {"-journal", "-wal", "-shm"};
constexpr int dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

open_error io_error(const std::string& root, std::string_view what, int err) {
    return open_error{"file store " + root + ": " + errno_text(what, err), 1};
}

// 0 when `name` is gone (or never was), else errno.
int remove_file(int dir, const std::string& name) {
    return ::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT ? 0 : errno;
}

// Opens the directory of `p` under objects/ one component at a time (O_NOFOLLOW), creating
// missing ones when `create`. Their entries become durable with the syncfs() that follows
// every change this conversion makes. 0 or errno (ENOENT: a directory is missing).
int open_dir(int objects_fd, const object_path& p, bool create, unique_fd& out) {
    unique_fd cur(::openat(objects_fd, ".", dir_flags));
    if (!cur)
        return errno;
    for (const auto& name : p.dirs) {
        if (create && ::mkdirat(cur.get(), name.c_str(), 0755) != 0 && errno != EEXIST)
            return errno;
        unique_fd next(::openat(cur.get(), name.c_str(), dir_flags));
        if (!next)
            return errno;
        cur = std::move(next);
    }
    out = std::move(cur);
    return 0;
}

key_row row_of(const record& r) {
    key_row row;
    row.version = r.version;
    row.exists = r.type == record_type::put;
    if (row.exists) {
        row.lock = r.lock;
        row.token = r.token;
        row.ms = r.ms;
        row.size = r.size;
        row.crc = r.body_crc;
        row.content_type = r.content_type;
    }
    return row;
}

key_row tombstone_row(std::int64_t version) {
    key_row row;
    row.version = version;
    return row;
}

template <typename Row>
std::vector<std::pair<std::string, Row>> sorted(std::unordered_map<std::string, Row>& map) {
    std::vector<std::pair<std::string, Row>> out;
    out.reserve(map.size());
    for (auto& [name, row] : map)
        out.emplace_back(name, std::move(row));
    map.clear();
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
}

class importer {
public:
    importer(const std::string& root, int root_fd, int objects_fd, legacy_import_stats& stats)
        : root_(root), root_fd_(root_fd), objects_fd_(objects_fd), stats_(stats) {
        std::random_device rd;
        std::uint64_t nonce = (std::uint64_t(rd()) << 32) ^ rd() ^ std::uint64_t(::getpid());
        static constexpr char hex[] = "0123456789abcdef";
        for (int shift = 60; shift >= 0; shift -= 4)
            nonce_ += hex[(nonce >> shift) & 0xF];
    }

    // Replays `text` into fences_ and keys_, bringing every body into line with its key's
    // row, and removes stray files.
    std::optional<open_error> replay(std::string_view text);
    std::optional<open_error> write_index();

private:
    // Does the body (or, with roll_forward, its temp file, then renamed into place) hold
    // what `r` says? 0 or the errno of a failure that must stop the conversion.
    int verify_put(const record& r, bool roll_forward, bool& ok, bool& rolled);
    // Rewrites the body of `r` (a record carrying it) at its path, through a temp file and
    // a rename. 0 or errno.
    int restore_body(const record& r);
    void remove_stray_files();

    const std::string& root_;
    const int root_fd_;
    const int objects_fd_;
    legacy_import_stats& stats_;
    std::string nonce_;
    std::uint64_t seq_ = 0;
    std::unordered_map<std::string, fence_row> fences_;
    std::unordered_map<std::string, key_row> keys_;
};

int importer::verify_put(const record& r, bool roll_forward, bool& ok, bool& rolled) {
    ok = rolled = false;
    auto path = object_path_for(r.key);
    if (!path)
        return 0;
    unique_fd dir;
    if (int err = open_dir(objects_fd_, *path, false, dir); err != 0)
        return err == ENOENT ? 0 : err;
    if (roll_forward && !r.tmp.empty()) {
        // Committed but not yet renamed when the process stopped: finish the rename.
        if (int err = file_matches(dir.get(), r.tmp, r.size, r.body_crc, ok); err != 0)
            return err;
        if (ok) {
            if (::renameat(dir.get(), r.tmp.c_str(), dir.get(), path->file.c_str()) != 0)
                return errno;
            rolled = true;
            return 0;
        }
    }
    return file_matches(dir.get(), path->file, r.size, r.body_crc, ok);
}

int importer::restore_body(const record& r) {
    auto path = object_path_for(r.key);
    if (!path || !r.body)
        return EINVAL;
    unique_fd dir;
    if (int err = open_dir(objects_fd_, *path, true, dir); err != 0)
        return err;
    const std::string tmp = tmp_name(path->file, nonce_ + "-" + std::to_string(seq_++));
    unique_fd fd(::openat(dir.get(), tmp.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd)
        return errno;
    int err = write_all(fd.get(), *r.body);
    fd.reset();
    if (err == 0 && ::renameat(dir.get(), tmp.c_str(), dir.get(), path->file.c_str()) != 0)
        err = errno;
    if (err != 0)
        ::unlinkat(dir.get(), tmp.c_str(), 0);
    return err;
}

std::optional<open_error> importer::replay(std::string_view text) {
    auto parsed = legacy::parse_journal(text);
    if (parsed.intact_after_damage)
        return open_error{"file store " + root_ + ": the journal is damaged at byte " +
                              std::to_string(parsed.valid_bytes) +
                              " and intact records follow; refusing to start because dropping "
                              "them could lower a fence (see docs/file-store.md, Recovery)",
                          1};
    if (parsed.damaged)
        logging::write(logging::level::warn, "file store: dropped a torn journal tail",
                       {{"root", root_},
                        {"offset", parsed.valid_bytes},
                        {"bytes", text.size() - parsed.valid_bytes}});

    // A key keeps its last record and the one before it.
    struct replayed {
        record last;
        std::optional<record> prev;
        bool verified = false;
    };
    std::unordered_map<std::string, replayed> replay;
    std::size_t verified_until = 0;
    for (std::size_t i = 0; i < parsed.records.size(); ++i) {
        record& r = parsed.records[i];
        if (r.type == record_type::verified) {
            if (i != 0)
                return open_error{"file store " + root_ + ": journal record " + std::to_string(i) +
                                      " is a misplaced snapshot header",
                                  1};
            verified_until = 1 + r.count;
            continue;
        }
        if (!r.lock.empty()) {
            auto [f, fresh] = fences_.try_emplace(r.lock, fence_row{r.token, r.ms});
            if (!fresh && r.token > f->second.token)
                f->second = {r.token, r.ms};
        }
        if (r.type == record_type::fence)
            continue;
        auto& k = replay[r.key];
        if (k.verified || !k.last.key.empty())
            k.prev = std::move(k.last);
        k.last = std::move(r);
        k.verified = i < verified_until;
    }

    // A put whose body is neither in place nor in its temp file is rewritten from the copy
    // in its record, if it has one (a journaled body whose file a power loss took).
    auto settle = [&](const record& r, bool roll_forward, bool& ok, bool& rolled) -> int {
        if (int err = verify_put(r, roll_forward, ok, rolled); err != 0 || ok || !r.body)
            return err;
        if (int err = restore_body(r); err != 0)
            return err;
        ok = true;
        ++stats_.restored_from_journal;
        return 0;
    };
    for (auto& [key, k] : replay) {
        if (k.verified) {
            keys_.emplace(key, row_of(k.last));
            continue;
        }
        if (k.last.type == record_type::del) {
            // A committed delete whose unlink may not have happened or reached the disk.
            auto path = object_path_for(key);
            unique_fd dir;
            if (path && open_dir(objects_fd_, *path, false, dir) == 0)
                ::unlinkat(dir.get(), path->file.c_str(), 0);
            keys_.emplace(key, row_of(k.last));
            continue;
        }
        bool ok = false, rolled = false;
        if (int err = settle(k.last, true, ok, rolled); err != 0)
            return io_error(root_, "checking the body of '" + key + "'", err);
        if (ok) {
            stats_.rolled_forward += rolled ? 1 : 0;
            keys_.emplace(key, row_of(k.last));
            continue;
        }
        // Neither body nor temp file holds the last write, and its record has no copy. Such
        // a body was durable before its record was written, so a correct run cannot get
        // here: fall back to the record before it. Its fence advance stays.
        ++stats_.fell_back;
        logging::write(logging::level::error,
                       "file store: journaled write not found on disk, falling back",
                       {{"root", root_}, {"key", key}, {"version", k.last.version}});
        if (!k.prev)
            continue; // the key never existed
        if (k.prev->type == record_type::put) {
            if (int err = settle(*k.prev, false, ok, rolled); err != 0)
                return io_error(root_, "checking the body of '" + key + "'", err);
            if (!ok) {
                logging::write(logging::level::error,
                               "file store: body lost, the key is now absent",
                               {{"root", root_}, {"key", key}});
                keys_.emplace(key, tombstone_row(k.last.version));
                continue;
            }
        }
        keys_.emplace(key, row_of(*k.prev));
    }
    remove_stray_files();
    return std::nullopt;
}

void importer::remove_stray_files() {
    // Iterative walk with one directory open at a time (keys can nest hundreds deep).
    std::vector<std::string> todo{""};
    while (!todo.empty()) {
        std::string rel = std::move(todo.back());
        todo.pop_back();
        DIR* d = open_directory(objects_fd_, rel);
        if (!d)
            continue;
        while (dirent* e = ::readdir(d)) {
            std::string_view name = e->d_name;
            if (name == "." || name == "..")
                continue;
            if (is_tmp_name(name)) {
                if (::unlinkat(::dirfd(d), e->d_name, 0) == 0)
                    ++stats_.temp_files;
                continue;
            }
            const bool is_dir = is_directory_entry(::dirfd(d), e->d_name, e->d_type);
            if (is_dir) {
                todo.push_back(rel.empty() ? std::string(name) : rel + "/" + std::string(name));
                continue;
            }
            // The body of a key the journal does not have (or has as a tombstone): a new
            // key's body written in place whose commit never happened.
            if (auto key = key_for_object(rel, name)) {
                auto k = keys_.find(*key);
                if ((k == keys_.end() || !k->second.exists) &&
                    ::unlinkat(::dirfd(d), e->d_name, 0) == 0)
                    ++stats_.uncommitted_bodies;
            }
        }
        ::closedir(d);
    }
}

std::optional<open_error> importer::write_index() {
    // Every rename, restore and unlink above (and whatever a killed 0.1 process left in the
    // page cache) must be durable before an index that relies on it.
    if (int err = sync_fd(root_fd_, sync_kind::filesystem); err != 0)
        return io_error(root_, "syncfs", err);

    const std::string final_name = index_file;
    const std::string new_name = final_name + index_new_suffix;
    // An interrupted conversion's file (and SQLite's beside it) is discarded: nothing
    // refers to it, and build_index wants a path that does not exist. So are stale side
    // files of index.db (above).
    for (const std::string& name : {new_name, final_name})
        for (const char* side : sqlite_side_files)
            if (int err = remove_file(root_fd_, name + side); err != 0)
                return io_error(root_, "unlink " + name + side, err);
    if (int err = remove_file(root_fd_, new_name); err != 0)
        return io_error(root_, "unlink " + new_name, err);

    for (const auto& [key, row] : keys_)
        ++(row.exists ? stats_.keys : stats_.tombstones);
    stats_.fences = fences_.size();
    std::string error;
    if (build_index(root_ + "/" + new_name, sorted(fences_), sorted(keys_), error) != index_ok) {
        ::unlinkat(root_fd_, new_name.c_str(), 0);
        return open_error{"file store " + root_ + ": writing " + new_name + ": " + error, 1};
    }
    FK_FAILPOINT("import_before_rename");
    if (::renameat(root_fd_, new_name.c_str(), root_fd_, final_name.c_str()) != 0)
        return io_error(root_, "rename " + new_name, errno);
    FK_FAILPOINT("import_after_rename");
    if (int err = sync_fd(root_fd_, sync_kind::directory); err != 0)
        return io_error(root_, "fsync of ROOT after renaming " + new_name, err);
    return std::nullopt;
}

// The journal stops counting once index.db exists; keep it beside, renamed, for the
// operator (a 0.1 binary started here by mistake finds no journal and serves nothing).
std::optional<open_error> retire_journal(const std::string& root, int root_fd) {
    if (int err = remove_file(root_fd, journal_new_name); err != 0)
        return io_error(root, std::string("unlink ") + journal_new_name, err);
    if (::renameat(root_fd, journal_name, root_fd, retired_name) != 0)
        return io_error(root, std::string("rename journal to ") + retired_name, errno);
    if (int err = sync_fd(root_fd, sync_kind::directory); err != 0)
        return io_error(root, "fsync of ROOT after retiring the journal", err);
    return std::nullopt;
}

} // namespace

std::optional<open_error> import_legacy_journal(const std::string& root, int root_fd,
                                                int objects_fd, legacy_import_stats* stats) {
    legacy_import_stats local;
    legacy_import_stats& s = stats ? *stats : local;
    s = {};

    unique_fd journal(::openat(root_fd, journal_name, O_RDONLY | O_CLOEXEC));
    if (!journal) {
        if (errno == ENOENT)
            return std::nullopt;
        return io_error(root, "open journal", errno);
    }
    struct stat st {};
    if (::fstatat(root_fd, index_file, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        // An interrupted conversion leaves no journal.retired beside its journal (the
        // retirement is its last step). With one there, this journal was begun after a
        // completed conversion: a 0.1 binary ran here, and retiring it would drop writes
        // and fence advances that 0.1 acknowledged.
        if (::fstatat(root_fd, retired_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            return open_error{"file store " + root +
                                  ": holds index.db, journal.retired and a journal written "
                                  "after the conversion (by fencekeeper 0.1?); refusing to "
                                  "start, because dropping that journal could lose "
                                  "acknowledged writes and lower fences",
                              1};
        if (errno != ENOENT)
            return io_error(root, std::string("stat ") + retired_name, errno);
        s.retired_only = true;
        journal.reset();
        if (auto err = retire_journal(root, root_fd))
            return err;
        logging::write(logging::level::info,
                       "file store retired the journal of a conversion that was interrupted",
                       {{"root", root}, {"renamed_to", retired_name}});
        return std::nullopt;
    }
    if (errno != ENOENT)
        return io_error(root, std::string("stat ") + index_file, errno);

    std::string text;
    if (int err = read_whole(journal.get(), text); err != 0)
        return io_error(root, "read journal", err);
    journal.reset();

    importer imp(root, root_fd, objects_fd, s);
    if (auto err = imp.replay(text))
        return err;
    text = {};
    if (auto err = imp.write_index())
        return err;
    s.converted = true;
    if (auto err = retire_journal(root, root_fd))
        return err;
    logging::write(logging::level::info, "file store converted its journal to index.db",
                   {{"root", root},
                    {"fences", s.fences},
                    {"keys", s.keys},
                    {"tombstones", s.tombstones},
                    {"rolled_forward", s.rolled_forward},
                    {"restored_from_journal", s.restored_from_journal},
                    {"fell_back", s.fell_back},
                    {"temp_files", s.temp_files},
                    {"uncommitted_bodies", s.uncommitted_bodies},
                    {"journal_renamed_to", retired_name}});
    return std::nullopt;
}

} // namespace fk::store::detail
