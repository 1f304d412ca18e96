#pragma once
// Plain settings structs with their defaults: the one place a default is written
// (config/keys.hpp reads them from a default-constructed `settings`). Parsing and
// validation live in config/parse.hpp; nothing here does I/O.

#include "config/log_level.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fk::config {

using millis = std::chrono::milliseconds;

struct http_limits {
    std::size_t max_header_bytes = 16 * 1024;     // request line + headers → 431 above
    std::size_t max_body_bytes = 8 * 1024 * 1024; // → 413 above
    millis header_timeout{10'000};                // to receive a whole request head
    millis idle_timeout{60'000};                  // keep-alive wait for the next request
    millis body_timeout{60'000};                  // to receive a request body
    millis write_timeout{30'000};                 // to send a response
    millis handshake_timeout{10'000};             // TLS: to complete the handshake
    std::size_t max_connections = 10'000;         // excess connections are refused
    std::size_t max_inflight_requests = 1'024;    // process-wide; excess → 503 + Retry-After
    // POST /v1/transactions: ops per transaction (store::default_max_txn_ops), and the
    // bytes of one put's body (decoded); the whole body stays within max_body_bytes.
    std::size_t max_txn_ops = 100;
    std::size_t max_txn_op_body_bytes = 1024 * 1024; // → 413 with the op's index
};

struct postgres_settings {
    std::string schema = "fencekeeper";
    int pool_size = 0;              // 0 → 2 × threads, at least 16
    std::size_t queue_limit = 1024; // waiting requests beyond the pool, then 503
    millis connect_timeout{5'000};
    millis statement_timeout{5'000};        // server side and our own timer
    std::size_t fence_cache_size = 100'000; // locks kept by the stale-rejection cache
    std::size_t batch_max = 64;        // writes per group-commit statement; 1 = one statement each
    std::size_t batch_concurrency = 2; // group-commit batches in flight at once
    // A batch beyond the first starts only once the newest one has run this long: it is
    // stuck (a row lock, a stalled database).
    millis batch_overlap{50};
    // A database whose measured round trip is at least this long is far: a second batch
    // then starts after half a round trip instead (pipelining over the network). 0 = off.
    millis far_round_trip{1};
};

// How the file store makes a batch's new body files durable before its commit record
// (docs/file-store.md, "Write sequence").
enum class file_flush {
    syncfs, // small bodies journaled with their records; else one syncfs() per batch
    fsync,  // an fsync() of every body file, plus one of each directory holding one
};

struct file_settings {
    file_flush flush = file_flush::syncfs;
    // Threads for the store's blocking file system calls (creating and writing bodies,
    // reads, fsyncs). 0: chosen by the store from `flush` (see fk::store::file_io_threads).
    int io_threads = 0;
    std::size_t fence_cache_size = 100'000; // locks kept by the stale-rejection cache
    // The committer waits for the flusher's syncfs while this many redo rows, or rows whose
    // bodies add up to this many bytes, are committed and not yet known durable: what a
    // start after a crash has to verify (docs/file-store.md, "Bounded restarts").
    std::int64_t max_redo_rows = 4096;
    std::int64_t max_redo_bytes = std::int64_t{64} << 20; // 64 MiB
};

// Idempotency records (docs/api.md#retries-and-exactly-once).
struct idempotency_settings {
    // A record answers retries for this long after its write committed; then it is
    // removed in the background, and a retry is a new request.
    std::chrono::seconds retention{86'400};
    // The records one caller (a scoped client; everyone, with one bearer token or no auth)
    // may hold at a time; past either, a keyed write that has no record yet gets 429
    // (backends/idem_quota.hpp). 0: no bound.
    std::int64_t max_records_per_client = 10'000'000;
    std::int64_t max_bytes_per_client = std::int64_t{8} << 30; // 8 GiB
};

// The TLS listener (docs/operations.md, "TLS and mTLS"). Without cert_file the listener
// speaks plain HTTP; with it, only TLS. parse_command_line checks that cert_file and
// key_file come together and that client_ca_file is not given alone.
enum class tls_version { v1_2, v1_3 };

struct tls_settings {
    std::optional<std::string> cert_file; // PEM chain, the server's certificate first
    std::optional<std::string> key_file;  // PEM private key of that certificate
    // PEM CA bundle: set → mTLS, every client must present a certificate it signed.
    std::optional<std::string> client_ca_file;
    tls_version min_version = tls_version::v1_2;
    bool enabled() const noexcept { return cert_file.has_value(); }
};

struct operation {
    std::string sql; // $1..$n placeholders
    // A failed statement's reply quotes the database's message (else only its SQLSTATE:
    // the message may show data from any table, or the schema).
    bool expose_errors = false;
};

// One caller of a shared proxy (docs/operations.md, "Scoped credentials"): who it is (a
// bearer token read from token_file, or the identity of its mTLS client certificate) and
// what it may touch. A prefix covers every key and lock name that starts with it; "" covers
// all; an empty list covers nothing. Write scope implies read scope.
struct auth_client {
    std::string name; // for logs; never the token
    std::optional<std::string> token_file;
    std::optional<std::string> tls_identity;
    std::vector<std::string> write_prefixes;
    std::vector<std::string> read_prefixes;
    bool metrics = false; // GET /metrics
    bool admin = false;   // fence floors (PUT /v1/floors, every floor listed)
};

struct settings {
    std::string listen_host = "127.0.0.1";
    std::uint16_t listen_port = 8080;
    std::string store = "file:./data"; // file:PATH or postgresql://... / postgres://...
    int threads = 0;                   // 0 → number of cores
    config::log_level log_level = config::log_level::info;
    http_limits http;
    postgres_settings postgres;
    file_settings file;
    std::map<std::string, operation> operations;
    idempotency_settings idempotency;
    millis shutdown_timeout{10'000}; // drain deadline on SIGTERM / SIGINT
    // Bearer token file (--auth-token-file); unset → FENCEKEEPER_AUTH_TOKEN, else auth off.
    std::optional<std::string> auth_token_file;
    // auth.clients: scoped callers. Non-empty excludes auth_token_file and
    // FENCEKEEPER_AUTH_TOKEN (checked by the parser and by proxy/preflight.hpp).
    std::vector<auth_client> auth_clients;
    tls_settings tls;
};

// threads resolved against the machine (0 → cores, at least 1).
int effective_threads(const settings& s) noexcept;
// pool size resolved (0 → 2 × threads, at least 16).
int effective_pool_size(const settings& s) noexcept;

enum class store_kind { file, postgres };
struct store_location {
    store_kind kind = store_kind::file;
    std::string path_or_uri; // PATH for file:, the whole URI for postgres
};
// Parses the store URL; nullopt when it is neither file:PATH nor postgres(ql)://.
std::optional<store_location> parse_store_url(const std::string& url);

} // namespace fk::config
