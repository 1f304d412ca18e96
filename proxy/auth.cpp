#include "proxy/auth.hpp"

#include "proxy/scopes.hpp"

#include <boost/beast/core/string.hpp>

#include <arpa/inet.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace fk::proxy {

namespace {

// No legitimate token is this long; refusing more keeps a wrong path (a log file, a
// device) from being read whole.
constexpr std::size_t max_token_file_bytes = 4096;

std::string_view trim(std::string_view s) noexcept {
    constexpr std::string_view ws = " \t\r\n\f\v";
    const auto b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) {
        return {};
    }
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Empty when `token` is usable, else the reason.
std::string check_token(std::string_view token) {
    if (token.empty()) {
        return "is empty";
    }
    for (char c : token) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x21 || u > 0x7e) {
            return "contains whitespace, control or non-ASCII characters";
        }
    }
    return {};
}

} // namespace

token_source_result load_token(const std::string& path) {
    token_source_result r;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int err = errno;
        r.error = "cannot read auth token file '" + path + "': " + std::strerror(err);
        return r;
    }
    std::string buf(max_token_file_bytes + 1, '\0');
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.bad()) {
        r.error = "cannot read auth token file '" + path + "'";
        return r;
    }
    buf.resize(static_cast<std::size_t>(in.gcount()));
    const auto nl = buf.find('\n');
    if (nl == std::string::npos && buf.size() > max_token_file_bytes) {
        r.error = "auth token file '" + path + "': first line is longer than " +
                  std::to_string(max_token_file_bytes) + " bytes";
        return r;
    }
    const std::string_view token = trim(std::string_view(buf).substr(0, nl));
    if (auto why = check_token(token); !why.empty()) {
        r.error = "auth token file '" + path + "': token " + why;
        return r;
    }
    r.token = std::string(token);
    return r;
}

token_source_result token_from_env(const char* value) {
    token_source_result r;
    if (value == nullptr) {
        return r;
    }
    const std::string_view token = trim(value);
    if (auto why = check_token(token); !why.empty()) {
        r.error = std::string(auth_token_env) + ": token " + why;
        return r;
    }
    r.token = std::string(token);
    return r;
}

token_source_result resolve_token(const std::optional<std::string>& file) {
    if (file) {
        return load_token(*file);
    }
    return token_from_env(std::getenv(std::string(auth_token_env).c_str()));
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
    unsigned acc = a.size() == b.size() ? 0u : 1u;
    for (std::size_t i = 0; i < b.size(); ++i) {
        // Reading a[0] in place of a missing byte keeps the memory access pattern the
        // same whatever a's length; the size check above has already failed the match.
        const std::size_t j = i < a.size() ? i : 0;
        const auto x = a.empty() ? 0u : static_cast<unsigned char>(a[j]);
        acc |= x ^ static_cast<unsigned char>(b[i]);
#if defined(__GNUC__)
        // Keeps the compiler from turning the loop into an early-exit comparison.
        __asm__ volatile("" : "+r"(acc));
#endif
    }
    return acc == 0;
}

bool is_loopback_host(std::string_view host) noexcept {
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    if (boost::beast::iequals(host, "localhost")) {
        return true;
    }
    char buf[64];
    if (host.empty() || host.size() >= sizeof buf) {
        return false;
    }
    std::memcpy(buf, host.data(), host.size());
    buf[host.size()] = '\0';
    unsigned char addr[16];
    if (::inet_pton(AF_INET, buf, addr) == 1) {
        return addr[0] == 127;
    }
    if (::inet_pton(AF_INET6, buf, addr) == 1) {
        static constexpr unsigned char loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                       0, 0, 0, 0, 0, 0, 0, 1};
        static constexpr unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        return std::memcmp(addr, loopback, 16) == 0 ||
               (std::memcmp(addr, v4_mapped, 12) == 0 && addr[12] == 127);
    }
    return false;
}

namespace {

// The credentials of "Bearer <credentials>" (scheme in any case, spaces after it), or
// nullopt for anything else.
std::optional<std::string_view> bearer_credentials(std::string_view authorization) noexcept {
    const std::string_view value = trim(authorization);
    const auto sp = value.find(' ');
    if (sp == std::string_view::npos || !boost::beast::iequals(value.substr(0, sp), "bearer"))
        return std::nullopt;
    return trim(value.substr(sp + 1));
}

} // namespace

clients_result load_clients(const std::vector<config::auth_client>& clients) {
    clients_result r;
    for (const auto& c : clients) {
        client_credentials cc;
        cc.scope = std::make_shared<const client_scope>(
            make_scope(c.name, c.write_prefixes, c.read_prefixes, c.metrics, c.admin));
        if (c.token_file) {
            auto t = load_token(*c.token_file);
            if (!t.ok()) {
                r.error = "auth.clients: client '" + c.name + "': " + t.error;
                return r;
            }
            for (const auto& other : r.clients)
                if (!other.token.empty() && other.token == *t.token) {
                    r.error = "auth.clients: clients '" + other.scope->name + "' and '" + c.name +
                              "' have the same token; each client needs its own";
                    return r;
                }
            cc.token = std::move(*t.token);
        } else if (c.tls_identity) {
            cc.tls_identity = *c.tls_identity;
        }
        r.clients.push_back(std::move(cc));
    }
    return r;
}

authenticator::authenticator(std::optional<std::string> token) {
    set_token(std::move(token));
}

void authenticator::set_state(std::shared_ptr<const state> next) {
    const std::lock_guard lock(mutex_);
    state_.swap(next);
    // The old state is released outside the lock, by `next`'s destructor.
}

void authenticator::set_token(std::optional<std::string> token) {
    set_state(token ? std::make_shared<const state>(state{std::move(token), {}}) : nullptr);
}

void authenticator::set_clients(std::vector<client_credentials> clients) {
    set_state(clients.empty()
                  ? nullptr
                  : std::make_shared<const state>(state{std::nullopt, std::move(clients)}));
}

std::shared_ptr<const authenticator::state> authenticator::current() const {
    const std::lock_guard lock(mutex_);
    return state_;
}

bool authenticator::enabled() const noexcept {
    const std::lock_guard lock(mutex_);
    return state_ != nullptr;
}

bool authenticator::scoped() const noexcept {
    const std::lock_guard lock(mutex_);
    return state_ != nullptr && !state_->clients.empty();
}

authenticator::caller authenticator::identify(std::optional<std::string_view> authorization,
                                              std::string_view tls_identity) const {
    const auto s = current();
    if (!s)
        return {true, nullptr};
    if (s->token) {
        const auto credentials = bearer_credentials(authorization.value_or(""));
        return {credentials && constant_time_equal(*credentials, *s->token), nullptr};
    }
    if (authorization) {
        const auto credentials = bearer_credentials(*authorization);
        if (!credentials)
            return {};
        // Every token is compared, whatever matched: the time taken says nothing about
        // which client (or how many) a guess came close to.
        std::shared_ptr<const client_scope> match;
        for (const auto& c : s->clients)
            if (!c.token.empty() && constant_time_equal(*credentials, c.token))
                match = c.scope;
        return {match != nullptr, std::move(match)};
    }
    if (tls_identity.empty())
        return {};
    for (const auto& c : s->clients)
        if (!c.tls_identity.empty() && c.tls_identity == tls_identity)
            return {true, c.scope};
    return {};
}

bool authenticator::authorized(std::string_view authorization) const noexcept {
    const auto s = current();
    if (!s)
        return true;
    if (authorization.empty())
        return false;
    return identify(authorization, {}).authenticated;
}

} // namespace fk::proxy
