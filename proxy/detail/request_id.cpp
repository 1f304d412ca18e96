#include "proxy/detail/request_id.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>

namespace fk::proxy::detail {

namespace {

// splitmix64: tiny and fast; seeded per thread from random_device, time and thread id.
struct splitmix64 {
    std::uint64_t state;
    std::uint64_t next() noexcept {
        std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
};

std::uint64_t seed() {
    std::random_device rd;
    std::uint64_t s = (std::uint64_t{rd()} << 32) ^ rd();
    s ^= static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    s ^= std::hash<std::thread::id>{}(std::this_thread::get_id()) * 0x9e3779b97f4a7c15ULL;
    return s;
}

} // namespace

bool is_acceptable_request_id(std::string_view id) noexcept {
    if (id.empty() || id.size() > max_request_id_bytes)
        return false;
    for (unsigned char c : id)
        if (c < 0x20 || c > 0x7e)
            return false;
    return true;
}

std::string generate_request_id() {
    thread_local splitmix64 rng{seed()};
    static constexpr char hex[] = "0123456789abcdef";
    std::uint64_t v = rng.next();
    std::string id(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4)
        id[static_cast<std::size_t>(i)] = hex[v & 0xf];
    return id;
}

std::string request_id_for(std::optional<std::string_view> client_value) {
    if (client_value && is_acceptable_request_id(*client_value))
        return std::string{*client_value};
    return generate_request_id();
}

} // namespace fk::proxy::detail
