#pragma once
// The set of open connections: what the graceful drain walks (stop the idle ones, let
// the busy ones finish) and what tells it when the last one has gone. Thread-safe; the
// sessions themselves run on their own executors.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace fk::proxy {

// What the registry asks of an open connection (proxy/session.hpp implements it).
class drainable {
public:
    virtual ~drainable() = default;
    // Thread-safe. Stop after the request in flight; an idle connection closes at once.
    virtual void drain() = 0;
    // Thread-safe. Close now, whatever is in flight.
    virtual void close() = 0;
};

class connection_registry {
public:
    // Registers a session; 0 when draining (the caller closes the connection at once).
    std::uint64_t add(const std::shared_ptr<drainable>& s);
    void remove(std::uint64_t id);
    std::size_t size() const;

    // From now on add() refuses; every registered session is asked to drain. `on_empty`
    // runs once, on whichever thread removes the last session (or here, when none is
    // open). Later calls do nothing.
    void begin_drain(std::function<void()> on_empty);
    bool draining() const;
    // Drops the on_empty callback (its owner is going away before the last session).
    void forget_on_empty();

    // Closes every open connection now (the drain deadline has passed).
    void close_all();

private:
    std::vector<std::shared_ptr<drainable>> snapshot() const;

    mutable std::mutex mu_;
    std::unordered_map<std::uint64_t, std::weak_ptr<drainable>> sessions_;
    std::uint64_t next_id_ = 1;
    bool draining_ = false;
    std::function<void()> on_empty_;
};

} // namespace fk::proxy
