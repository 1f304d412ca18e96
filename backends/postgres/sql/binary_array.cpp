#include "backends/postgres/sql/binary_array.hpp"

namespace fk::store::pg::sql {

array_builder::array_builder(unsigned elem_oid, std::size_t count) {
    auto be32 = [this](std::uint32_t v) {
        for (int shift = 24; shift >= 0; shift -= 8)
            out_ += static_cast<char>((v >> shift) & 0xFF);
    };
    out_.reserve(20 + count * 12);
    be32(1);        // dimensions
    be32(0);        // has nulls: set by add_null()
    be32(elem_oid); // element type
    be32(static_cast<std::uint32_t>(count));
    be32(1); // lower bound
}

void array_builder::add(std::string_view bytes) {
    const auto n = static_cast<std::uint32_t>(bytes.size());
    for (int shift = 24; shift >= 0; shift -= 8)
        out_ += static_cast<char>((n >> shift) & 0xFF);
    out_.append(bytes);
}

void array_builder::add_int8(std::int64_t v) {
    char b[8];
    const auto u = static_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i)
        b[i] = static_cast<char>((u >> (56 - 8 * i)) & 0xFF);
    add(std::string_view(b, 8));
}

void array_builder::add_bool(bool v) {
    const char b = v ? 1 : 0;
    add(std::string_view(&b, 1));
}

void array_builder::add_null() {
    out_[7] = 1;                        // the header's has-nulls flag (bytes 4..7, big-endian)
    out_.append("\xff\xff\xff\xff", 4); // length -1: NULL
}

std::string array_builder::finish() && {
    return std::move(out_);
}

} // namespace fk::store::pg::sql
