#include "fence/floors.hpp"

namespace fk::fence {

floor_set::raise_outcome floor_set::raise(std::string_view prefix, token_t token,
                                          std::int64_t now_ms, std::size_t limit) {
    auto it = floors_.find(prefix);
    if (it != floors_.end()) {
        if (it->second.token >= token)
            return raise_outcome::not_above;
        it->second = value{token, now_ms};
        return raise_outcome::raised;
    }
    if (floors_.size() >= limit)
        return raise_outcome::full;
    floors_.emplace(std::string(prefix), value{token, now_ms});
    ++lengths_[prefix.size()];
    return raise_outcome::raised;
}

void floor_set::load(floor_entry e) {
    auto it = floors_.find(e.prefix);
    if (it != floors_.end()) {
        if (e.token > it->second.token)
            it->second = value{e.token, e.updated_at_ms};
        return;
    }
    ++lengths_[e.prefix.size()];
    floors_.emplace(std::move(e.prefix), value{e.token, e.updated_at_ms});
}

std::optional<token_t> floor_set::floor_of(std::string_view prefix) const {
    auto it = floors_.find(prefix);
    if (it == floors_.end())
        return std::nullopt;
    return it->second.token;
}

std::optional<floor_hit> floor_set::highest_for(std::string_view lock) const {
    std::optional<floor_hit> best;
    for (const auto& [len, count] : lengths_) {
        (void)count;
        if (len > lock.size())
            break;
        auto it = floors_.find(lock.substr(0, len));
        if (it == floors_.end())
            continue;
        // Lengths come in increasing order: >= keeps the longest prefix on a tie.
        if (!best || it->second.token >= best->token)
            best = floor_hit{it->first, it->second.token, it->second.updated_at_ms};
    }
    return best;
}

effective_fence floor_set::effective(std::string_view lock, std::optional<token_t> own) const {
    effective_fence e;
    e.token = own;
    if (auto hit = highest_for(lock); hit && (!own || hit->token > *own)) {
        e.token = hit->token;
        e.floor = hit;
    }
    return e;
}

std::vector<floor_entry> floor_set::list() const {
    std::vector<floor_entry> out;
    out.reserve(floors_.size());
    for (const auto& [prefix, v] : floors_)
        out.push_back(floor_entry{prefix, v.token, v.updated_at_ms});
    return out;
}

} // namespace fk::fence
