#pragma once
// Store requests the unit tests build again and again: a put of `key` under its own
// lock, a delete, a transaction's delete op.

#include "backends/store.hpp"

#include <string>

namespace fk_test_store {

inline fk::store::put_request put_req(std::string key, fk::store::token_t token,
                                      std::string body = "b") {
    fk::store::put_request r;
    r.lock = key;
    r.key = std::move(key);
    r.token = token;
    r.body = std::move(body);
    r.content_type = "text/plain";
    return r;
}

inline fk::store::delete_request del_req(std::string key, fk::store::token_t token) {
    fk::store::delete_request r;
    r.lock = key;
    r.key = std::move(key);
    r.token = token;
    return r;
}

inline fk::store::txn_op txn_del(std::string key, fk::store::token_t token) {
    fk::store::txn_op o;
    o.op = fk::store::txn_op::kind::remove;
    o.lock = key;
    o.key = std::move(key);
    o.token = token;
    return o;
}

} // namespace fk_test_store
