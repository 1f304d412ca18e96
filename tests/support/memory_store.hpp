#pragma once
// An in-memory fk::store::store with the contract's semantics (fence::check_write against
// the effective fence, fence::floor_set for the floors, all under one mutex), for unit tests
// and fuzzers: no files, no database. Failure injection in the
// spirit of Beast's fail_count: fail_next() makes the next call(s) return an error
// without touching any state.

#include "backends/store.hpp"
#include "fence/floors.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace fk::test {

class memory_store final : public fk::store::store {
public:
    // An operation body: runs after the fence check passed, inside the same step; an
    // error result (e.g. operation_failed) leaves the fence unchanged.
    using operation_fn =
        std::function<fk::store::operation_result(const fk::store::operation_request&)>;

    memory_store();

    net::awaitable<fk::store::write_result> put(fk::store::put_request req) override;
    net::awaitable<fk::store::write_result> remove(fk::store::delete_request req) override;
    net::awaitable<fk::store::object_result> get(std::string key, bool with_body) override;
    net::awaitable<fk::store::write_result> advance_fence(fk::store::fence_request req) override;
    net::awaitable<fk::store::fence_result> read_fence(std::string lock) override;
    net::awaitable<fk::store::list_result> list_fences(fk::store::list_request req) override;
    net::awaitable<fk::store::write_result> raise_floor(fk::store::floor_request req) override;
    net::awaitable<fk::store::floors_result> list_floors() override;

    // All or nothing under the one mutex: every op is decided against the state before
    // the transaction (a key is named once and a lock carries one token, so an earlier op
    // never changes a later op's verdict), then the operations run in op order (an
    // operation_fn's error refuses the whole transaction), then everything applies.
    // check's result token is the effective fence before the transaction.
    net::awaitable<fk::store::txn_result> transact(fk::store::txn_request req) override;
    bool supports_operations() const noexcept override { return !operations_.empty(); }
    net::awaitable<fk::store::operation_result>
    run_operation(fk::store::operation_request req) override;
    std::optional<std::size_t> operation_param_count(const std::string& name) const override;
    bool has_operation(const std::string& name) const override;

    bool ready() const noexcept override { return ready_.load(); }
    void stop() override;

    // Test controls.
    void set_ready(bool ready) noexcept { ready_.store(ready); }
    // `takes`: the parameter count operation_param_count reports (none: unknown).
    void add_operation(std::string name, operation_fn fn,
                       std::optional<std::size_t> takes = std::nullopt);
    // The next `count` store calls fail with `e` (unavailable, outcome_unknown, internal...).
    void fail_next(errc e, int count = 1);
    // Milliseconds since the epoch used for updated_at; defaults to the system clock.
    void set_clock(std::function<std::int64_t()> now_ms);

    // Direct inspection, bypassing the interface. fence_of: the lock's own fence;
    // effective_fence_of: max(own, every matching floor); floor_of: the prefix's floor.
    std::optional<fk::store::token_t> fence_of(const std::string& lock) const;
    std::optional<fk::store::token_t> effective_fence_of(const std::string& lock) const;
    std::optional<fk::store::token_t> floor_of(const std::string& prefix) const;
    std::size_t floor_count() const;
    std::optional<std::string> body_of(const std::string& key) const;
    std::size_t calls() const noexcept { return calls_.load(); }

private:
    struct key_entry {
        bool exists = false;
        std::string lock;
        std::int64_t version = 0;
        fk::store::token_t token = 0;
        std::string content_type;
        std::string body;
    };
    struct fence_entry {
        fk::store::token_t token = 0;
        std::int64_t updated_at_ms = 0;
    };

    // Called with mu_ held. Returns the injected error, if any.
    std::optional<errc> take_failure();
    std::optional<fk::store::token_t> fence_locked(const std::string& lock) const;
    // The fence a write under `lock` is checked against (own fence and floors).
    fence::effective_fence effective_locked(const std::string& lock) const;
    // Moves the fence of `lock` to at least `token`; updated_at changes only when it moves.
    fk::store::token_t advance_locked(const std::string& lock, fk::store::token_t token);
    fk::store::write_result write_locked(const std::string& key, const std::string& lock,
                                         fk::store::token_t token, const fence::preconditions& pre,
                                         bool is_delete, std::string content_type,
                                         std::string body);
    // write_locked's checks alone (no failure injection, nothing changed): ok, or the
    // refusal with its details.
    fk::store::write_result check_write_locked(const std::string& key, const std::string& lock,
                                               fk::store::token_t token,
                                               const fence::preconditions& pre) const;

    mutable std::mutex mu_;
    std::map<std::string, key_entry> keys_;     // std::map<std::string>: bytewise order
    std::map<std::string, fence_entry> fences_; // bytewise order, as the listing needs
    fence::floor_set floors_;
    std::map<std::string, operation_fn> operations_;
    std::map<std::string, std::size_t> param_counts_;
    // Idempotency-Key records ("scope\nkey" → the request's fingerprint and its outcome);
    // never expire here.
    struct idem_record {
        std::string fingerprint;
        fk::store::write_result write;
        fk::store::operation_result operation;
        std::string txn_results; // a transaction's results_json
    };
    std::map<std::string, idem_record> idem_;
    // Called with mu_ held: the record answering `idem`, if there is one (a reused key
    // answers with a result whose error is idempotency_key_reused).
    const idem_record* idem_find(const std::optional<fk::store::idempotency>& idem,
                                 bool& reused) const;
    void idem_save(const std::optional<fk::store::idempotency>& idem,
                   const fk::store::write_result* w, const fk::store::operation_result* o);
    std::function<std::int64_t()> now_ms_;
    errc fail_with_ = errc::ok;
    int fail_count_ = 0;
    bool stopped_ = false;
    std::atomic<bool> ready_{true};
    std::atomic<std::size_t> calls_{0};
};

} // namespace fk::test
