#pragma once
// The store interface: everything the HTTP side needs from a place that keeps fences and
// resources. Every call is a coroutine that resumes on the caller's executor; a store
// never blocks the caller's thread (the file store runs its syscalls on its own threads,
// the Postgres store speaks libpq non-blocking on the io_context).
//
// The contract every implementation keeps (docs/api.md#the-fence-rule): a write, delete or fence
// advance is checked with fence::check_write / fence::accepts and applied in one atomic
// step; a result with error == ok is returned only once data and fence are durable.

#include "backends/commit_stats.hpp"
#include "backends/file_store_health.hpp"
#include "backends/net.hpp"
#include "backends/txn.hpp"
#include "fence/error.hpp"
#include "fence/rule.hpp"
#include "fence/token.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fk::store {

using fence::token_t;

// A write's Idempotency-Key (docs/api.md#retries-and-exactly-once). A store that gets one
// on a write keeps these promises:
// - Before anything else (before the fence cache's stale check too), a committed, unexpired
//   record under (scope, key) answers the write: the same fingerprint → the recorded
//   outcome with `replayed` set and nothing applied; another fingerprint →
//   idempotency_key_reused and nothing applied. A record older than the retention is
//   absent.
// - Otherwise the write runs as without a key; if it applies (error == ok), the record —
//   fingerprint and the outcome fields the reply is rendered from (put: created, version,
//   token; delete and fence: token; operation: token, rows_affected, rows_json) — commits
//   in the same atomic step as the write and the fence. A refused write records nothing.
// - Two writes with one (scope, key) are never both applied, on one proxy or several.
struct idempotency {
    std::string scope;       // the caller: a scoped client's name; "" for the one token or no auth
    std::string key;         // the header's value: 1..255 bytes of 0x21..0x7E
    std::string fingerprint; // 32 bytes: SHA-256 of the request (proxy/idempotency.hpp)
};

struct put_request {
    std::string key;
    std::string lock; // already defaulted to the key by the caller when absent
    token_t token = 0;
    std::string content_type;
    std::string body;
    fence::preconditions pre;
    std::optional<idempotency> idem;
};

struct delete_request {
    std::string key;
    std::string lock;
    token_t token = 0;
    fence::preconditions pre;
    std::optional<idempotency> idem;
};

// PUT /v1/fences/{lock}: advance the fence without writing data.
struct fence_request {
    std::string lock;
    token_t token = 0;
    std::optional<idempotency> idem;
};

struct write_result {
    errc error = errc::ok; // ok, stale_token, lock_mismatch, precondition_failed,
                           // idempotency_key_reused, unavailable, outcome_unknown,
                           // internal
    // ok: answered from an idempotency record, nothing applied now; created, version and
    // token are the recorded ones.
    bool replayed = false;
    bool created = false;      // put: the key did not exist or was deleted (→ 201)
    std::int64_t version = 0;  // put: the key's new version
    token_t token = 0;         // ok: the fence after the step (raise_floor: the floor)
    token_t current_token = 0; // stale_token: the effective fence that rejected the write
    // stale_token: set when a fence floor is what rejected the write (the floor's token
    // is above the lock's own fence): that floor's prefix. Counted in the metrics.
    std::optional<std::string> floor;
    std::string lock; // lock_mismatch: the lock the key belongs to
    // Detail for the other errors. stale_token, lock_mismatch and precondition_failed are
    // data (the fields above); the proxy words their replies (proxy/error_response.cpp).
    std::string message;
};

struct object_result {
    errc error = errc::ok; // ok, not_found, unavailable, internal
    std::string body;      // empty when the caller asked for metadata only (HEAD)
    std::uint64_t size = 0;
    std::string content_type;
    std::int64_t version = 0;
    token_t token = 0; // token of the write that made this version
    std::string lock;
    std::string message;
};

struct fence_info {
    std::string lock;
    token_t token = 0;
    std::int64_t updated_at_ms = 0; // Unix time in ms of the last time the fence moved
    // read_fence only: set when a floor sets the effective fence (its token is above the
    // lock's own fence, or the lock has no fence of its own): the floor's prefix; token and
    // updated_at_ms are then the floor's.
    std::optional<std::string> floor;
};

struct fence_result {
    errc error = errc::ok; // ok, not_found, unavailable
    fence_info fence;
    std::string message;
};

struct list_request {
    std::string prefix;
    std::optional<std::string> after; // exclusive; listing is bytewise sorted by lock
    std::size_t limit = 100;          // 1..1000, checked by the caller
};

struct list_result {
    errc error = errc::ok;
    std::vector<fence_info> fences;
    std::optional<std::string> next; // pass as `after` for the next page; nullopt at the end
    std::string message;
};

// Fence floors (docs/api.md#fence-floors). A floor (prefix, token) gives every lock whose
// name starts with `prefix` ("" = every lock) an effective fence of at least `token`:
//     effective fence(lock) = max(own fence, every floor whose prefix the lock starts with)
// Every write, delete, fence advance and operation is checked against the effective fence
// in the same atomic step as today's check (a write at or above it sets the lock's own
// fence as today); read_fence returns it. One record per prefix, whatever the number of
// locks. A store keeps at most max_floors of them.
inline constexpr std::size_t max_floors = 1000;

struct floor_request {
    std::string prefix; // may be empty
    token_t token = 0;  // the new floor: must be above the prefix's current floor
    std::optional<idempotency> idem;
};

struct floor_info {
    std::string prefix;
    token_t token = 0;
    std::int64_t updated_at_ms = 0; // Unix time in ms of the last raise
};

struct floors_result {
    errc error = errc::ok;          // ok, unavailable, internal
    std::vector<floor_info> floors; // sorted bytewise by prefix
    std::string message;
};

struct operation_request {
    std::string name;
    std::string lock;
    token_t token = 0;
    // Text-format parameters ($1..$n); nullopt is SQL NULL.
    text_params params;
    std::optional<idempotency> idem;
};

struct operation_result {
    errc error = errc::ok; // ok, not_found (no such operation), invalid_request (param
                           // count), stale_token, operation_failed,
                           // idempotency_key_reused, unavailable, outcome_unknown
    // ok: answered from an idempotency record, nothing run now; token, rows_affected and
    // rows_json are the recorded ones.
    bool replayed = false;
    token_t token = 0;
    token_t current_token = 0;        // stale_token: the effective fence
    std::optional<std::string> floor; // stale_token: as write_result::floor
    std::int64_t rows_affected = 0;
    std::string rows_json; // a JSON array of objects, column name → value
    std::string sqlstate;
    std::string message; // for the client
    // The database's own text for an error of the user's statement (also one that does
    // not prepare): for the log only. `message` repeats it only where the operation's
    // config sets expose_errors, since it may quote data from any table or the schema.
    std::string server_message;
};

// POST /v1/transactions (docs/api.md#post-v1transactions; backends/txn.hpp has the ops).
struct txn_request {
    std::vector<txn_op> ops; // validated by validate_txn
    std::optional<idempotency> idem;
};

struct txn_result {
    errc error = errc::ok; // ok, stale_token, lock_mismatch, precondition_failed,
                           // operation_failed, invalid_request, not_found (no such
                           // operation), idempotency_key_reused, unavailable,
                           // outcome_unknown, internal
    // ok: answered from the transaction's Idempotency-Key record, nothing applied now;
    // results_json is the recorded text.
    bool replayed = false;
    // ok: the "results" array (render_txn_results), the text the reply carries.
    std::string results_json;
    // An error decided by one op (stale_token, lock_mismatch, precondition_failed,
    // operation_failed, invalid_request, not_found): that op's index in ops. When several
    // ops would fail, the first in op order decides (docs/api.md: operations run after
    // every other op's checks, so a failing put or check is named before an operation).
    std::optional<std::size_t> op_index;
    token_t current_token = 0;        // stale_token: the effective fence that refused the op
    std::optional<std::string> floor; // stale_token: as write_result::floor
    std::string lock;                 // lock_mismatch: the lock the key belongs to
    std::string sqlstate;             // operation_failed
    std::string message;
    std::string server_message; // operation_failed: as operation_result::server_message
};

// The message of every idempotency_key_reused a store answers (the proxy's own, for a
// claim it refuses before the store, is in error_response.cpp).
inline constexpr const char* idempotency_key_reused_message =
    "this Idempotency-Key was used for a different request; nothing was applied";

// A write's answer from its Idempotency-Key record (the promises on struct idempotency):
// the recorded outcome with `replayed` when the fingerprints match, else
// idempotency_key_reused. Both stores answer through this one function.
write_result replay_from_record(std::string_view recorded_fingerprint, std::string_view fingerprint,
                                bool created, std::int64_t version, token_t token);

// Idempotency-Key records held per caller (idempotency.max_records_per_client and
// max_bytes_per_client; backends/idem_quota.hpp bounds them). A record's size counts as
// its scope, key, fingerprint and recorded results text, plus idem_record_overhead.
inline constexpr std::uint64_t idem_record_overhead = 64;
constexpr std::uint64_t idem_record_bytes(std::size_t scope, std::size_t key,
                                          std::size_t results) noexcept {
    return scope + key + 32 + results + idem_record_overhead;
}

struct idem_usage_row {
    std::string scope;
    std::uint64_t records = 0;
    std::uint64_t bytes = 0;    // idem_record_bytes summed
    std::int64_t oldest_ms = 0; // Unix ms of the scope's oldest unexpired commit
};

struct idem_presence {
    errc error = errc::ok; // ok, unavailable
    bool found = false;    // ok: an unexpired record exists
    std::string message;
};

struct idem_usage_result {
    errc error = errc::ok;              // ok, unavailable
    std::vector<idem_usage_row> scopes; // every scope with an unexpired record
    std::string message;
};

class store {
public:
    virtual ~store() = default;

    virtual net::awaitable<write_result> put(put_request req) = 0;
    virtual net::awaitable<write_result> remove(delete_request req) = 0;
    virtual net::awaitable<object_result> get(std::string key, bool with_body) = 0;
    // Advances the fence of `lock` to `token` without writing data (PUT /v1/fences/{lock}).
    virtual net::awaitable<write_result> advance_fence(fence_request req) = 0;
    virtual net::awaitable<fence_result> read_fence(std::string lock) = 0;
    virtual net::awaitable<list_result> list_fences(list_request req) = 0;

    // PUT /v1/floors?prefix=P. Returns write_result: ok with token = the new floor once it
    // is durable and no write below it can commit under the prefix any more (writes that
    // were running when it was asked for have either committed before it or will be
    // checked against it: Postgres takes a SHARE lock on the fences table, the file store
    // raises it in its single committer); stale_token with current_token = the
    // prefix's floor when req.token is not above it (floors only go up); invalid_request
    // when max_floors floors exist and the prefix has none; the Idempotency-Key promises
    // as for a fence advance (the recorded outcome is the token).
    virtual net::awaitable<write_result> raise_floor(floor_request req) = 0;
    // GET /v1/floors.
    virtual net::awaitable<floors_result> list_floors() = 0;

    // POST /v1/transactions: every op applies, in one atomic step with every fence check,
    // or none does (docs/api.md#post-v1transactions). ok only once all of it is durable.
    // The Idempotency-Key promises of struct idempotency hold for the whole transaction
    // (the recorded outcome is results_json). An `operation` op on a store without
    // operations: invalid_request with its op_index.
    virtual net::awaitable<txn_result> transact(txn_request req) = 0;

    // Named SQL operations: only the Postgres store has them (404 elsewhere).
    virtual bool supports_operations() const noexcept { return false; }
    virtual net::awaitable<operation_result> run_operation(operation_request req);
    // The parameter count of operation `name`'s statement, once known (the Postgres store
    // learns it when the statement first prepares): the HTTP side stops parsing a body
    // at the first parameter beyond it. From any thread.
    virtual std::optional<std::size_t> operation_param_count(const std::string& name) const {
        (void)name;
        return std::nullopt;
    }
    // Whether operation `name` is configured (the Postgres store: from the config, fixed at
    // start): the HTTP side keeps no parameters of a transaction that names one that is
    // not, which the store refuses before anything else. From any thread.
    virtual bool has_operation(const std::string& name) const {
        (void)name;
        return false;
    }

    // Idempotency-Key records (backends/idem_quota.hpp). The unexpired records per scope,
    // read in one pass (a background scan, seconds apart); stores without records answer
    // unavailable.
    virtual net::awaitable<idem_usage_result> idempotency_usage();
    // Whether (scope, key) has an unexpired record.
    virtual net::awaitable<idem_presence> has_idempotency_record(std::string scope,
                                                                 std::string key);
    // When `scope` holds as many records as it may (a store wrapped by idem_quota): about
    // how long until it may record another; nullopt when it may now. Any thread.
    virtual std::optional<std::chrono::seconds> idempotency_records_full(std::string_view scope) {
        (void)scope;
        return std::nullopt;
    }

    // /readyz: the store can take requests now.
    virtual bool ready() const noexcept = 0;
    // Group-commit batch sizes (fencekeeper_store_batch_size); null when the store does
    // not batch. Lives as long as the store.
    virtual const commit_stats* batches() const noexcept { return nullptr; }
    // The file store's flush backlog and checkpoints (fencekeeper_file_*); null for any
    // other store. Lives as long as the store.
    virtual const file_store_health* file_health() const noexcept { return nullptr; }
    // Called once, after the HTTP side has drained: finish or fail pending work, stop
    // background threads and timers. Requests after stop() get unavailable.
    virtual void stop() = 0;
};

} // namespace fk::store
