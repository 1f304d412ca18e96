#include "backends/store.hpp"

namespace fk::store {

write_result replay_from_record(std::string_view recorded_fingerprint, std::string_view fingerprint,
                                bool created, std::int64_t version, token_t token) {
    write_result r;
    if (recorded_fingerprint != fingerprint) {
        r.error = errc::idempotency_key_reused;
        r.message = idempotency_key_reused_message;
        return r;
    }
    r.replayed = true;
    r.created = created;
    r.version = version;
    r.token = token;
    return r;
}

net::awaitable<operation_result> store::run_operation(operation_request req) {
    operation_result r;
    r.error = errc::not_found;
    r.message = "named operations need the postgres store: no operation '" + req.name + "'";
    co_return r;
}

net::awaitable<idem_usage_result> store::idempotency_usage() {
    idem_usage_result r;
    r.error = errc::unavailable;
    r.message = "this store keeps no Idempotency-Key records";
    co_return r;
}

net::awaitable<idem_presence> store::has_idempotency_record(std::string scope, std::string key) {
    (void)scope;
    (void)key;
    co_return idem_presence{errc::unavailable, false,
                            "this store keeps no Idempotency-Key records"};
}

} // namespace fk::store
