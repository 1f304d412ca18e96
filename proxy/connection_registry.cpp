#include "proxy/connection_registry.hpp"

#include <utility>

namespace fk::proxy {

std::uint64_t connection_registry::add(const std::shared_ptr<drainable>& s) {
    std::lock_guard lock{mu_};
    if (draining_)
        return 0;
    auto id = next_id_++;
    sessions_.emplace(id, s);
    return id;
}

void connection_registry::remove(std::uint64_t id) {
    std::function<void()> notify;
    {
        std::lock_guard lock{mu_};
        if (sessions_.erase(id) == 0)
            return;
        if (draining_ && sessions_.empty())
            notify = std::exchange(on_empty_, nullptr);
    }
    if (notify)
        notify();
}

std::size_t connection_registry::size() const {
    std::lock_guard lock{mu_};
    return sessions_.size();
}

bool connection_registry::draining() const {
    std::lock_guard lock{mu_};
    return draining_;
}

void connection_registry::forget_on_empty() {
    std::lock_guard lock{mu_};
    on_empty_ = nullptr;
}

std::vector<std::shared_ptr<drainable>> connection_registry::snapshot() const {
    std::vector<std::shared_ptr<drainable>> out;
    std::lock_guard lock{mu_};
    out.reserve(sessions_.size());
    for (const auto& [id, weak] : sessions_)
        if (auto s = weak.lock())
            out.push_back(std::move(s));
    return out;
}

void connection_registry::begin_drain(std::function<void()> on_empty) {
    std::function<void()> notify;
    {
        std::lock_guard lock{mu_};
        if (draining_)
            return;
        draining_ = true;
        if (sessions_.empty())
            notify = std::move(on_empty);
        else
            on_empty_ = std::move(on_empty);
    }
    if (notify) {
        notify();
        return;
    }
    // Sessions are asked outside the lock: drain() only posts to their executors.
    for (auto& s : snapshot())
        s->drain();
}

void connection_registry::close_all() {
    for (auto& s : snapshot())
        s->close();
}

} // namespace fk::proxy
