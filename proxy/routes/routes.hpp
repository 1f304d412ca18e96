#pragma once
// Every route's handler, by route family, one file each in proxy/routes/ (docs/api.md#routes
// is what they implement); handlers.cpp's dispatch picks one by the route's match. Each
// takes the call by value (its fields are references to what the request owns) and
// answers one response.

#include "proxy/routes/pipeline.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace fk::proxy::routes {

// resources.cpp: PUT, DELETE, GET and HEAD /v1/resources/{key}.
net::awaitable<response> put_resource(call c);
net::awaitable<response> delete_resource(call c);
net::awaitable<response> get_resource(call c);

// fences.cpp: GET and PUT /v1/fences/{lock}, GET /v1/fences.
net::awaitable<response> get_fence(call c);
net::awaitable<response> put_fence(call c);
net::awaitable<response> list_fences(call c);

// floors.cpp: PUT and GET /v1/floors.
net::awaitable<response> raise_floor(call c);
net::awaitable<response> list_floors(call c);

// operations.cpp: POST /v1/operations/{name}.
net::awaitable<response> run_operation(call c);
// The 404 of a store without named operations (also refused from the head).
response no_operations(std::string_view name);

// transactions.cpp: POST /v1/transactions.
net::awaitable<response> post_transaction(call c);
// A transaction's header defaults for its ops: Fencing-Token and Fencing-Lock, each
// optional, each refused as on single writes when malformed.
struct txn_defaults {
    std::optional<token_t> token;
    std::optional<std::string> lock;
};

// Refused from the head too: the defaults are the transaction's only header checks before
// its body.
checked<txn_defaults> txn_defaults_of(const request& req);

// probes.cpp: GET /healthz, /readyz, /metrics.
response healthz();
response readyz(const call& c);
response get_metrics(const call& c);

} // namespace fk::proxy::routes
