#pragma once
// The embedded file store (file:PATH). On-disk layout and crash behaviour: see
// docs/file-store.md.

#include "backends/make_store.hpp"
#include "backends/store.hpp"

#include <boost/asio/io_context.hpp>

#include <memory>
#include <string>
#include <variant>

namespace fk::store {

struct file_store_options {
    int io_threads = 4; // threads for blocking file syscalls (body writes, fsyncs, reads)
    // How a batch's new bodies become durable before its commit record. syncfs falls back
    // to fsync on kernels before 5.8, whose syncfs() does not report write-back errors.
    config::file_flush flush = config::file_flush::syncfs;
};

std::variant<std::unique_ptr<store>, open_error>
open_file_store(net::io_context& io, const std::string& root, const file_store_options& opts);

} // namespace fk::store
