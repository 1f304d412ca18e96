#include "backends/store.hpp"

namespace fk::store {

net::awaitable<operation_result> store::run_operation(operation_request req) {
    operation_result r;
    r.error = errc::not_found;
    r.message = "named operations need the postgres store: no operation '" + req.name + "'";
    co_return r;
}

} // namespace fk::store
