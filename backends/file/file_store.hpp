#pragma once
// The embedded file store (file:PATH). On-disk layout and crash behaviour: see
// docs/file-store.md.

#include "backends/make_store.hpp"
#include "backends/store.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <variant>

namespace fk::store {

struct file_store_options {
    // Threads for blocking file syscalls (body writes, fsyncs, reads); 0 = file_io_threads.
    int io_threads = 0;
    // How a batch's new bodies become durable before its commit record. syncfs falls back
    // to fsync on kernels before 5.8, whose syncfs() does not report write-back errors.
    config::file_flush flush = config::file_flush::syncfs;
    // Locks whose fence is kept in memory to reject stale writes without reading the index.
    std::size_t fence_cache_size = 100'000;
    // How long an Idempotency-Key record answers retries (config idempotency.retention_s).
    std::chrono::seconds idempotency_retention{86'400};
    // The flusher's backlog that makes the committer wait (config file.max_redo_rows and
    // file.max_redo_bytes): redo rows committed whose files are not yet known durable, and
    // the bytes of their bodies, which is what a start after a crash verifies
    // (docs/file-store.md, "Bounded restarts").
    std::int64_t max_redo_rows = 4096;
    std::int64_t max_redo_bytes = std::int64_t{64} << 20;
};

// The pool's size when none is configured: 2 when batches are made durable by the index
// and syncfs() (a body is created and written there, never fsynced), 4 when every body is
// fsynced on the pool. Creating files in one directory serializes on its lock, and threads
// beyond two there mostly spin on that lock (docs/file-store.md, "`file.io_threads`").
int file_io_threads(int configured, bool syncfs_batches) noexcept;

std::variant<std::unique_ptr<store>, open_error>
open_file_store(net::io_context& io, const std::string& root, const file_store_options& opts);

} // namespace fk::store
