#pragma once
// Helpers shared by the file store's unit tests: a fresh temp directory per test and a
// way to drive the store's coroutines to completion on an io_context.

#include "backends/file/file_store.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <variant>

namespace fk::store::test {

namespace fs = std::filesystem;

struct temp_dir {
    fs::path path;
    temp_dir() {
        std::string tmpl = (fs::temp_directory_path() / "fk-file-store-XXXXXX").string();
        char* p = ::mkdtemp(tmpl.data());
        REQUIRE(p != nullptr);
        path = p;
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
};

template <typename T> T run(net::io_context& io, net::awaitable<T> a) {
    std::optional<T> out;
    std::exception_ptr error;
    net::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
        error = e;
        out = std::move(v);
    });
    io.restart();
    io.run();
    if (error)
        std::rethrow_exception(error);
    REQUIRE(out.has_value());
    return std::move(*out);
}

inline std::unique_ptr<store>
open_ok(net::io_context& io, const fs::path& root, int threads = 4,
        fk::config::file_flush flush = fk::config::file_flush::syncfs) {
    auto r = open_file_store(io, root.string(), file_store_options{threads, flush});
    if (auto* err = std::get_if<open_error>(&r))
        FAIL("open_file_store failed: " << err->message);
    return std::move(std::get<std::unique_ptr<store>>(r));
}

inline put_request put_req(std::string key, std::string lock, token_t token, std::string body,
                           std::string content_type = "text/plain") {
    put_request r;
    r.key = std::move(key);
    r.lock = std::move(lock);
    r.token = token;
    r.body = std::move(body);
    r.content_type = std::move(content_type);
    return r;
}

inline delete_request del_req(std::string key, std::string lock, token_t token) {
    delete_request r;
    r.key = std::move(key);
    r.lock = std::move(lock);
    r.token = token;
    return r;
}

} // namespace fk::store::test
