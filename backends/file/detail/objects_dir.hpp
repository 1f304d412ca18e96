#pragma once
// ROOT/objects, where the bodies live (docs/file-store.md, "Layout"): opening a key's
// directory (creating the missing ones, each made durable before anything inside it is
// committed) and removing directories that deletes left empty.
//
// Threads: any. Staging threads hold structure() shared from opening a directory with
// create = true until the file they create in it exists; reclaim_empty() takes it
// exclusively, so a directory is never removed between those two steps. The set of
// directories known durable is guarded by its own mutex.

#include "backends/file/detail/key_path.hpp"
#include "backends/file/detail/sys.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_set>

namespace fk::store::detail {

class objects_dir {
public:
    // Called when an fsync of a new directory's parent fails (the store must fail-stop).
    using sync_failure = std::function<void(std::string_view what, int err)>;

    // Creates ROOT/objects if missing and opens it. 0 or errno.
    int open(int root_fd, sync_failure on_sync_failure);

    int fd() const noexcept { return fd_->get(); }

    // open_dir's answer when making p's directories would take more than its budget.
    static constexpr int over_budget = -1;

    // The directory holding p's body; with create, missing directories are made, and
    // each new one's entry is fsynced in its parent. 0 or errno (ENOENT without create
    // when a directory is missing).
    // made_from: lowered to the level (index into p.dirs) of the outermost directory this
    // call made, so that reclaim_empty(p, p.dirs.size() - *made_from) can take back what
    // a write that is not committed created. budget: the directories this call may make,
    // decremented per mkdir; at 0, a missing directory ends it with over_budget (what it
    // made so far stays, and is counted in made_from).
    int open_dir(const object_path& p, bool create, std::shared_ptr<unique_fd>& out,
                 std::size_t* made_from = nullptr, std::size_t* budget = nullptr);

    // Removes p's directories from the innermost outwards while they are empty, at most
    // `levels` of them. Holds two descriptors at a time however deep p is.
    void reclaim_empty(const object_path& p, std::size_t levels = SIZE_MAX);

    std::shared_mutex& structure() noexcept { return structure_; }

private:
    // Bounded: when full it is cleared, and a directory is then found again with one
    // mkdirat (EEXIST) per level.
    static constexpr std::size_t max_known_dirs = 65536;

    std::shared_ptr<unique_fd> fd_ = std::make_shared<unique_fd>();
    sync_failure on_sync_failure_;
    std::shared_mutex structure_;
    // Directories whose entry is known durable (created and parent fsynced by us, or
    // present at startup, which ends with a syncfs). Keyed by object_path::dir_id()
    // prefixes.
    std::mutex dirs_mutex_;
    std::unordered_set<std::string> durable_dirs_;
};

} // namespace fk::store::detail
