#pragma once
// Binary array encoding for a batch's parameters (one dimension, lower bound 1; bodies as
// raw bytes, no quoting; NULL elements only where add_null() is called: the idempotency
// arrays of unkeyed rows). Pure; safe from any thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fk::store::pg::sql {

inline constexpr unsigned oid_bool = 16, oid_bytea = 17, oid_int8 = 20, oid_text = 25;

class array_builder {
public:
    array_builder(unsigned elem_oid, std::size_t count);
    void add(std::string_view bytes);
    void add_int8(std::int64_t v);
    void add_bool(bool v);
    void add_null();
    std::string finish() &&;

private:
    std::string out_;
};

} // namespace fk::store::pg::sql
