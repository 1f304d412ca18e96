#include "proxy/tls.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <utility>

namespace fk::proxy {

namespace {

namespace ssl = boost::asio::ssl;

// OpenSSL's message for the error it queued last ("key values mismatch"), then clears
// the queue so that the next call starts clean.
std::string openssl_error(std::string fallback) {
    unsigned long last = 0;
    while (const unsigned long e = ERR_get_error())
        last = e;
    if (last == 0)
        return fallback;
    char text[256];
    ERR_error_string_n(last, text, sizeof text);
    return text;
}

// A readable file, said in the words of the config key: OpenSSL's own message for a
// missing file ("system library") names neither.
std::optional<std::string> unreadable(const std::string& key, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return key + " '" + path + "': cannot read the file";
    return std::nullopt;
}

std::string asn1_time_text(const ASN1_TIME* t) {
    BIO* bio = BIO_new(BIO_s_mem());
    if (!bio)
        return {};
    std::string out;
    if (ASN1_TIME_print(bio, t) == 1) {
        char* data = nullptr;
        const long n = BIO_get_mem_data(bio, &data);
        if (n > 0)
            out.assign(data, static_cast<std::size_t>(n));
    }
    BIO_free(bio);
    return out;
}

std::string serial_text(const X509* cert) {
    const ASN1_INTEGER* serial = X509_get0_serialNumber(cert);
    BIGNUM* bn = ASN1_INTEGER_to_BN(serial, nullptr);
    if (!bn)
        return {};
    std::string out;
    if (char* hex = BN_bn2hex(bn)) {
        out = hex;
        OPENSSL_free(hex);
    }
    BN_free(bn);
    return out;
}

} // namespace

tls_context_result make_tls_context(const config::tls_settings& t) {
    tls_context_result r;
    const std::string cert = t.cert_file.value_or("");
    const std::string key = t.key_file.value_or("");
    if (auto e = unreadable("tls.cert_file", cert)) {
        r.error = *e;
        return r;
    }
    if (auto e = unreadable("tls.key_file", key)) {
        r.error = *e;
        return r;
    }
    if (t.client_ca_file) {
        if (auto e = unreadable("tls.client_ca_file", *t.client_ca_file)) {
            r.error = *e;
            return r;
        }
    }

    ERR_clear_error();
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
    SSL_CTX* native = ctx->native_handle();
    // No SSLv3/TLS 1.0/1.1 whatever min_version says; no renegotiation (a client could
    // make the server redo the expensive half of a handshake at will); compression is off
    // by default in OpenSSL 3 (CRIME).
    const int min = t.min_version == config::tls_version::v1_3 ? TLS1_3_VERSION : TLS1_2_VERSION;
    SSL_CTX_set_min_proto_version(native, min);
    SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                    SSL_OP_NO_COMPRESSION);

    boost::system::error_code ec;
    // An encrypted key fails to load instead of OpenSSL asking for a passphrase on the
    // terminal (blocking start, or the reload thread, forever).
    ctx->set_password_callback(
        [](std::size_t, ssl::context::password_purpose) { return std::string{}; });
    ctx->use_certificate_chain_file(cert, ec);
    if (ec) {
        r.error = "tls.cert_file '" + cert + "': not a PEM certificate chain (" +
                  openssl_error(ec.message()) + ")";
        return r;
    }
    ctx->use_private_key_file(key, ssl::context::pem, ec);
    if (ec) {
        r.error = "tls.key_file '" + key + "': not a PEM private key, or not the key of " + cert +
                  " (" + openssl_error(ec.message()) + ")";
        return r;
    }
    if (SSL_CTX_check_private_key(native) != 1) {
        r.error = "tls.key_file '" + key + "' is not the private key of tls.cert_file '" + cert +
                  "' (" + openssl_error("key values mismatch") + ")";
        return r;
    }

    if (t.client_ca_file) {
        const std::string& ca = *t.client_ca_file;
        ctx->load_verify_file(ca, ec);
        if (ec) {
            r.error = "tls.client_ca_file '" + ca + "': not a PEM CA bundle (" +
                      openssl_error(ec.message()) + ")";
            return r;
        }
        // The CA names sent in the CertificateRequest, so that a client holding several
        // certificates picks the right one.
        if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca.c_str()))
            SSL_CTX_set_client_CA_list(native, names);
        ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
        // Needed for session resumption once clients are verified.
        static constexpr unsigned char sid[] = "fencekeeper";
        SSL_CTX_set_session_id_context(native, sid, sizeof sid - 1);
    }

    const X509* leaf = SSL_CTX_get0_certificate(native);
    if (leaf) {
        r.serial = serial_text(leaf);
        r.not_after = asn1_time_text(X509_get0_notAfter(leaf));
        r.expired = X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0;
    }
    ERR_clear_error();
    r.context = std::move(ctx);
    return r;
}

tls_credentials::tls_credentials(std::shared_ptr<ssl_context> context)
    : context_(std::move(context)) {}

std::shared_ptr<ssl_context> tls_credentials::current() const {
    std::lock_guard lock(mutex_);
    return context_;
}

void tls_credentials::set(std::shared_ptr<ssl_context> context) {
    std::lock_guard lock(mutex_);
    context_.swap(context);
    // The old context is released outside the lock, when `context` goes (connections
    // that still use it keep their own reference).
}

std::string peer_identity(void* handle) {
    auto* ssl = static_cast<SSL*>(handle);
    X509* cert = SSL_get1_peer_certificate(ssl);
    if (!cert)
        return {};
    std::string identity;
    auto* names =
        static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
    if (names) {
        for (int i = 0; i < sk_GENERAL_NAME_num(names) && identity.empty(); ++i) {
            const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
            if (name->type != GEN_DNS && name->type != GEN_URI)
                continue;
            const ASN1_IA5STRING* s = name->d.ia5;
            identity.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                            static_cast<std::size_t>(ASN1_STRING_length(s)));
        }
        GENERAL_NAMES_free(names);
    }
    if (identity.empty()) {
        const X509_NAME* subject = X509_get_subject_name(cert);
        const int at = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
        if (at >= 0) {
            const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
            unsigned char* utf8 = nullptr;
            const int n = ASN1_STRING_to_UTF8(&utf8, cn);
            if (n > 0)
                identity.assign(reinterpret_cast<const char*>(utf8), static_cast<std::size_t>(n));
            OPENSSL_free(utf8);
        }
    }
    X509_free(cert);
    return identity;
}

std::string protocol_of(void* handle) {
    return SSL_get_version(static_cast<SSL*>(handle));
}

tls_failure classify_handshake_error(const boost::system::error_code& ec) noexcept {
    if (ec == boost::beast::error::timeout)
        return tls_failure::timeout;
    if (ec.category() == boost::asio::error::get_ssl_category()) {
        switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
        // Ours of theirs: no certificate, or one that does not verify.
        case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
        case SSL_R_CERTIFICATE_VERIFY_FAILED:
        // Theirs of ours, as the client's alert says: our certificate did not verify.
        case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
        case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
        case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
        case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
            return tls_failure::certificate;
        default:
            return tls_failure::protocol;
        }
    }
    // The peer went away (EOF, reset, a truncated stream) or a drain cancelled it.
    return tls_failure::closed;
}

} // namespace fk::proxy
