#pragma once
// Statement parameters: the request's fields in the order sql/statements.hpp gives, as
// text, or as binary arrays for a batch (sql/binary_array.hpp). Pure; safe from any
// thread. Binary parameters view the request's storage, which must outlive the exchange.

#include "backends/postgres/sql/statements.hpp"
#include "backends/store.hpp"
#include "fence/rule.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::store::pg::sql {

// One statement parameter. Text parameters own their value; binary ones (the body) view
// the request's storage, which outlives the query.
struct param {
    std::optional<std::string> text; // nullopt and !binary → SQL NULL; owned binary value
    std::string_view binary;         // binary value viewed (when text is nullopt)
    bool is_binary = false;

    static param null() { return {}; }
    static param of(std::string v) { return param{std::move(v), {}, false}; }
    static param bytes(std::string_view v) { return param{std::nullopt, v, true}; }
    static param owned_bytes(std::string v) { return param{std::move(v), {}, true}; }
    std::string_view binary_value() const noexcept { return text ? *text : binary; }
};
using param_list = std::vector<param>;

// The arrays PQsendQueryPrepared takes, as every sender of these parameters passes them
// (detail/connection.cpp, scripts/bench/pg_batch_ceiling.cpp): binary values in binary
// format, text in text, NULL as NULL. The values point into `params`, which must outlive
// the call.
struct param_arrays {
    std::vector<const char*> values;
    std::vector<int> lengths;
    std::vector<int> formats;

    explicit param_arrays(const sql::param_list& params) {
        values.reserve(params.size());
        lengths.reserve(params.size());
        formats.reserve(params.size());
        for (const auto& p : params) {
            if (p.is_binary) {
                const auto v = p.binary_value();
                values.push_back(v.data() ? v.data() : "");
                lengths.push_back(static_cast<int>(v.size()));
                formats.push_back(1);
            } else if (p.text) {
                values.push_back(p.text->c_str());
                lengths.push_back(static_cast<int>(p.text->size()));
                formats.push_back(0);
            } else {
                values.push_back(nullptr);
                lengths.push_back(0);
                formats.push_back(0);
            }
        }
    }
    // An operation's parameters, in text format, pointing into `params`.
    explicit param_arrays(const fk::store::text_params& params) {
        values.reserve(params.size());
        lengths.reserve(params.size());
        formats.assign(params.size(), 0);
        for (auto it = params.begin(); it != params.end(); ++it) {
            values.push_back(it.c_str());
            lengths.push_back(it.c_str() ? static_cast<int>(it.length()) : 0);
        }
    }
    int size() const noexcept { return static_cast<int>(values.size()); }
};

// Parameters, in the order the statements above expect them.
// Parameters, in the order the statements expect them.
param_list put_params(const put_request& req);
param_list delete_params(const delete_request& req);
param_list advance_params(std::string_view lock, token_t token);
param_list key_params(std::string_view key);
param_list lock_params(std::string_view lock);
// A prepared statement chosen by the parameters, with them.
struct bound_statement {
    const char* statement;
    param_list params;
};
// Listing: lower bound (>= prefix), exclusive `after`, upper bound (bounded only: the
// prefix's UTF-8 successor), limit. Fetches limit + 1 rows so that the caller knows
// whether there is a next page.
bound_statement list_params(const list_request& req);
param_list op_fence_params(std::string_view lock, token_t token);

// One write of a batch, viewing the request (which outlives the exchange).
struct batch_item {
    std::string_view key;
    std::string_view lock;
    token_t token = 0;
    bool is_delete = false;
    std::string_view body;
    std::string_view content_type;
    fence::preconditions pre;
    const idempotency* idem = nullptr; // the request's Idempotency-Key, if any
};
// The batch statement's shape for `items`: keyed when any row carries an
// Idempotency-Key, else plain (sql/statements.hpp, write_batch_sql).
batch_shape write_batch_shape(const std::vector<batch_item>& items) noexcept;
// Arrays in binary format (no quoting, bodies as raw bytes), for the statement of
// `shape`: nine arrays for the plain shape; for the keyed one the idempotency arrays too
// (NULL for unkeyed rows) and `retention` (idempotency.retention).
param_list write_batch_params(const std::vector<batch_item>& items, batch_shape shape,
                              std::chrono::seconds retention);
// The prepared statement of the shape `items` need, with its parameters.
bound_statement write_batch_statement(const std::vector<batch_item>& items,
                                      std::chrono::seconds retention);
// A batch of one goes out as the single-row statement (put_sql / delete_sql), which costs
// the database less for one row than the batch pipeline (docs/postgres.md).
// Unkeyed only: a keyed lone write goes as a batch of one (write_batch_params).
param_list single_write_params(const batch_item& item);

// Idempotency-Key records (sql/statements.hpp). The fingerprint goes out as binary bytea
// viewing `idem`, which must outlive the exchange.
param_list idem_get_params(const idempotency& idem, std::chrono::seconds retention);
param_list advance_idem_params(std::string_view lock, token_t token, const idempotency& idem,
                               std::chrono::seconds retention);
param_list op_record_params(const idempotency& idem, token_t token, std::int64_t rows_affected,
                            const std::string& rows_json, std::chrono::seconds retention);
param_list idem_expire_params(std::chrono::seconds retention, std::size_t limit);

// raise_floor_sql's parameters: the key's scope, key and fingerprint are NULL for an
// unkeyed raise. The fingerprint views `req`, which must outlive the exchange.
param_list raise_floor_params(const floor_request& req, std::chrono::seconds retention);

// txn_sql's ten arrays, one element per op, in binary format: NULL where an op has no such
// field (a fence op's key, a check_version's lock). Bodies view `ops`, which must outlive
// the exchange.
param_list txn_params(const std::vector<txn_op>& ops);

} // namespace fk::store::pg::sql
