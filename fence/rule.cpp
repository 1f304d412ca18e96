#include "fence/rule.hpp"

namespace fk::fence {

errc check_write(const key_state& key, std::string_view lock, std::optional<token_t> fence,
                 token_t token, const preconditions& pre) noexcept {
    // A key belongs to the lock it was created under; naming another lock could step
    // around that lock's fence, so it is refused before the fence is even looked at.
    if (key.exists && key.lock != lock)
        return errc::lock_mismatch;
    if (!accepts(fence, token))
        return errc::stale_token;
    if (pre.if_none_match_any && key.exists)
        return errc::precondition_failed;
    if (pre.if_match_any && !key.exists)
        return errc::precondition_failed;
    if (pre.if_match && (!key.exists || key.version != *pre.if_match))
        return errc::precondition_failed;
    return errc::ok;
}

} // namespace fk::fence
