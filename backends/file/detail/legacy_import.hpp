#pragma once
// The upgrade from fencekeeper 0.1's file store: converts a directory whose metadata is in
// ROOT/journal (legacy_journal.hpp) into ROOT/index.db (index.hpp), once, at startup.
//
// Threads: the opening thread, before the store starts any thread of its own, with ROOT/LOCK
// held and before the index is opened. It blocks on file I/O and fsyncs for as long as it
// takes (it reads the whole journal and walks the whole objects/ tree: a one-time cost).

#include "backends/make_store.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace fk::store::detail {

// What one call did (for the log line and for tests).
struct legacy_import_stats {
    bool converted = false;    // a journal was replayed and index.db built from it
    bool retired_only = false; // index.db was already there: only the journal was retired
    std::size_t fences = 0;
    std::size_t keys = 0;       // keys with a body
    std::size_t tombstones = 0; // deleted keys, kept for their version
    std::size_t rolled_forward = 0;
    std::size_t restored_from_journal = 0;
    std::size_t fell_back = 0;
    std::size_t temp_files = 0;         // stray "~tmp~" files removed
    std::size_t uncommitted_bodies = 0; // in-place bodies of keys the journal does not have
};

// ROOT/journal present: replays it exactly as 0.1's recovery did (torn tail dropped, damage
// followed by intact records refused; committed renames rolled forward, journaled bodies
// restored, a write whose body is lost falls back to the key's previous record; stray temp
// files and uncommitted in-place bodies removed), syncfs(), writes ROOT/index.db.new with
// build_index, renames it to ROOT/index.db, fsyncs ROOT, then retires the journal (renamed
// to ROOT/journal.retired; a leftover journal.new is removed) and fsyncs ROOT again.
// ROOT/index.db already present: an earlier conversion completed but stopped before
// retiring the journal; only the retirement is done. Unless ROOT/journal.retired is there
// too: then the journal was written after a completed conversion (a 0.1 binary ran on the
// directory) and the call refuses rather than drop it. No ROOT/journal: nothing.
//
// Every step can be interrupted (kill -9, power loss) and the call repeated: until the
// rename to index.db the journal stays authoritative and a leftover index.db.new is
// discarded; after it, index.db is.
//
// `root` is for messages; root_fd and objects_fd are O_DIRECTORY descriptors of ROOT and
// ROOT/objects. Returns nullopt on success (or when there was nothing to do), otherwise the
// error that must stop startup (exit status 1).
std::optional<open_error> import_legacy_journal(const std::string& root, int root_fd,
                                                int objects_fd,
                                                legacy_import_stats* stats = nullptr);

} // namespace fk::store::detail
