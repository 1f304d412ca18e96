#pragma once
// X-Request-Id: the client's value is echoed when it is 1 to 128 printable ASCII
// characters (so it can go into logs and headers as is), else one is generated.

#include <optional>
#include <string>
#include <string_view>

namespace fk::proxy::detail {

inline constexpr std::size_t max_request_id_bytes = 128;

bool is_acceptable_request_id(std::string_view id) noexcept;

// 16 lowercase hex characters from a per-thread PRNG: unique enough to correlate logs,
// not a secret.
std::string generate_request_id();

// The client's id when acceptable, else a generated one.
std::string request_id_for(std::optional<std::string_view> client_value);

} // namespace fk::proxy::detail
