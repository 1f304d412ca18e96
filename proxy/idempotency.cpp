#include "proxy/idempotency.hpp"

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace fk::proxy {

bool valid_idempotency_key(std::string_view key) noexcept {
    if (key.empty() || key.size() > max_idempotency_key_bytes)
        return false;
    for (unsigned char c : key)
        if (c < 0x21 || c > 0x7e)
            return false;
    return true;
}

namespace {

struct md_ctx_free {
    void operator()(EVP_MD_CTX* c) const noexcept { EVP_MD_CTX_free(c); }
};

class sha256 {
public:
    sha256() : ctx_(EVP_MD_CTX_new()) {
        if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
            throw std::runtime_error("SHA-256 is not available from OpenSSL");
    }
    void bytes(const void* p, std::size_t n) {
        if (n > 0 && EVP_DigestUpdate(ctx_.get(), p, n) != 1)
            throw std::runtime_error("SHA-256 update failed");
    }
    void u64(std::uint64_t v) {
        std::array<unsigned char, 8> b{};
        for (int i = 7; i >= 0; --i, v >>= 8)
            b[static_cast<std::size_t>(i)] = static_cast<unsigned char>(v & 0xff);
        bytes(b.data(), b.size());
    }
    // Length first: "ab" + "c" and "a" + "bc" differ.
    void field(std::string_view s) {
        u64(s.size());
        bytes(s.data(), s.size());
    }
    std::string finish() {
        std::string out(32, '\0');
        unsigned int n = 0;
        if (EVP_DigestFinal_ex(ctx_.get(), reinterpret_cast<unsigned char*>(out.data()), &n) != 1 ||
            n != out.size())
            throw std::runtime_error("SHA-256 final failed");
        return out;
    }

private:
    std::unique_ptr<EVP_MD_CTX, md_ctx_free> ctx_;
};

} // namespace

std::string fingerprint(const request_identity& id) {
    sha256 h;
    h.field("fencekeeper idempotency 1"); // the encoding's version
    h.field(id.method);
    h.field(id.route);
    h.field(id.name);
    h.field(id.lock);
    h.u64(static_cast<std::uint64_t>(id.token));
    h.u64(id.pre.if_match_any ? 1 : 0);
    h.u64(id.pre.if_match ? 1 : 0);
    h.u64(static_cast<std::uint64_t>(id.pre.if_match.value_or(0)));
    h.u64(id.pre.if_none_match_any ? 1 : 0);
    h.field(id.content_type);
    h.field(id.body);
    return h.finish();
}

inflight_keys::claim::~claim() {
    if (owner_)
        owner_->release(id_);
}

std::optional<inflight_keys::claim> inflight_keys::try_claim(std::string_view scope,
                                                             std::string_view key) {
    std::string id;
    id.reserve(scope.size() + 1 + key.size());
    id.append(scope);
    id.push_back('\n'); // never in a key (0x21..0x7E), so the pair is unambiguous
    id.append(key);
    std::lock_guard lock{mutex_};
    if (!ids_.insert(id).second)
        return std::nullopt;
    return claim{this, std::move(id)};
}

std::size_t inflight_keys::size() const {
    std::lock_guard lock{mutex_};
    return ids_.size();
}

void inflight_keys::release(const std::string& id) noexcept {
    std::lock_guard lock{mutex_};
    ids_.erase(id);
}

} // namespace fk::proxy
