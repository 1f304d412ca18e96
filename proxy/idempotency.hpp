#pragma once
// Idempotency-Key on writes (docs/api.md#retries-and-exactly-once), the proxy's part: the
// header's syntax, the request's fingerprint, and the keys in flight on this process. The
// record itself lives in the store, committed with the write (backends/store.hpp,
// struct idempotency).
//
// Cheap to include: no Boost, no OpenSSL.

#include "fence/rule.hpp"
#include "fence/token.hpp"

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

namespace fk::proxy {

inline constexpr std::string_view idempotency_key_field = "Idempotency-Key";
inline constexpr std::string_view idempotent_replayed_field = "Idempotent-Replayed";
inline constexpr std::size_t max_idempotency_key_bytes = 255;

// 1..255 bytes, each 0x21..0x7E (visible ASCII: no space, no control, no UTF-8).
bool valid_idempotency_key(std::string_view key) noexcept;

// What a request's fingerprint covers: a retry must match the first request in every one
// of these for its recorded reply to be replayed.
struct request_identity {
    std::string_view method;       // "PUT", "DELETE", "POST"
    std::string_view route;        // the router's route name ("resource", "fence", ...)
    std::string_view name;         // the key, lock or operation in the path
    std::string_view lock;         // the write's lock (defaulted) or Fencing-Lock
    fence::token_t token = 0;      // Fencing-Token
    fence::preconditions pre;      // If-Match / If-None-Match
    std::string_view content_type; // the Content-Type field as sent ("" when absent)
    std::string_view body;         // the body's bytes
};

// SHA-256 of a length-prefixed encoding of every member, 32 bytes. Unambiguous: no two
// different identities encode alike. Hashes the body at roughly a GB/s; callers move
// large bodies off the I/O threads.
std::string fingerprint(const request_identity& id);

// The (scope, key) pairs whose request is being served by this process. A second request
// with a pair in flight is answered 409 idempotency_in_progress instead of racing the
// first into the store. (The store excludes double application by itself, also between
// proxies; this only turns a wasted store round trip into a clear answer.) Any thread.
class inflight_keys {
public:
    // Releases the pair when destroyed (the request is answered, or failed).
    class claim {
    public:
        claim(claim&& other) noexcept : owner_(other.owner_), id_(std::move(other.id_)) {
            other.owner_ = nullptr;
        }
        claim(const claim&) = delete;
        claim& operator=(const claim&) = delete;
        claim& operator=(claim&&) = delete;
        ~claim();

    private:
        friend class inflight_keys;
        claim(inflight_keys* owner, std::string id) : owner_(owner), id_(std::move(id)) {}
        inflight_keys* owner_;
        std::string id_;
    };

    // nullopt: a request with this pair is already in flight here.
    std::optional<claim> try_claim(std::string_view scope, std::string_view key);
    std::size_t size() const;

private:
    void release(const std::string& id) noexcept;

    mutable std::mutex mutex_;
    std::unordered_set<std::string> ids_;
};

} // namespace fk::proxy
