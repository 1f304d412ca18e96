#include "proxy/tls.hpp"

#include <doctest/doctest.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>

// proxy/tls.hpp without sockets: contexts built from certificates made here with
// OpenSSL's API, identities read after an in-memory handshake (two SSL objects joined by
// a BIO pair), and the failure classes. The listener itself is tested end to end in
// tests/integration/test_tls.py.

using namespace fk::proxy;

namespace {

struct pkey_free {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct x509_free {
    void operator()(X509* x) const { X509_free(x); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;

pkey_ptr new_key() {
    return pkey_ptr{EVP_EC_gen("P-256")};
}

// A certificate for `key` with subject CN=`cn`, signed by (issuer, issuer_key), or
// self-signed when issuer is null. `san`: a subjectAltName value ("DNS:a,URI:b") or empty.
x509_ptr new_cert(EVP_PKEY* key, const std::string& cn, long serial, const std::string& san,
                  X509* issuer, EVP_PKEY* issuer_key, bool ca = false) {
    x509_ptr cert{X509_new()};
    X509_set_version(cert.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
    X509_set_pubkey(cert.get(), key);
    X509_NAME* name = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer ? issuer : cert.get(), cert.get(), nullptr, nullptr, 0);
    const auto add = [&](int nid, const std::string& value) {
        X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
        REQUIRE(ext != nullptr);
        X509_add_ext(cert.get(), ext, -1);
        X509_EXTENSION_free(ext);
    };
    add(NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
    if (ca)
        add(NID_key_usage, "critical,keyCertSign,cRLSign");
    if (!san.empty())
        add(NID_subject_alt_name, san);
    REQUIRE(X509_sign(cert.get(), issuer_key ? issuer_key : key, EVP_sha256()) > 0);
    return cert;
}

// Files removed at the end of the test.
struct temp_dir {
    std::filesystem::path path;
    temp_dir() {
        static int counter = 0;
        path = std::filesystem::temp_directory_path() /
               ("fk-tls-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
        std::filesystem::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;

    std::string write(const std::string& name, const std::string& content) {
        const auto p = path / name;
        std::ofstream(p, std::ios::binary) << content;
        return p.string();
    }
    std::string cert(const std::string& name, X509* x) {
        BIO* bio = BIO_new(BIO_s_mem());
        PEM_write_bio_X509(bio, x);
        return write(name, drain(bio));
    }
    std::string key(const std::string& name, EVP_PKEY* k) {
        BIO* bio = BIO_new(BIO_s_mem());
        PEM_write_bio_PrivateKey(bio, k, nullptr, nullptr, 0, nullptr, nullptr);
        return write(name, drain(bio));
    }
    static std::string drain(BIO* bio) {
        char* data = nullptr;
        const long n = BIO_get_mem_data(bio, &data);
        std::string out(data, static_cast<std::size_t>(n));
        BIO_free(bio);
        return out;
    }
};

// A CA, a server certificate from it, and the files.
struct pki {
    temp_dir dir;
    pkey_ptr ca_key = new_key();
    x509_ptr ca = new_cert(ca_key.get(), "test CA", 1, "", nullptr, nullptr, true);
    pkey_ptr server_key = new_key();
    x509_ptr server =
        new_cert(server_key.get(), "localhost", 0x1234, "DNS:localhost", ca.get(), ca_key.get());
    std::string ca_file = dir.cert("ca.pem", ca.get());
    std::string cert_file = dir.cert("server.pem", server.get());
    std::string key_file = dir.key("server.key", server_key.get());

    fk::config::tls_settings settings(bool mutual = false) const {
        fk::config::tls_settings t;
        t.cert_file = cert_file;
        t.key_file = key_file;
        if (mutual)
            t.client_ca_file = ca_file;
        return t;
    }
};

// Runs a handshake between a server SSL on `server_ctx` and a client presenting
// (cert, key), in memory. Returns the server's view of the client's identity, or
// nullopt when the handshake failed.
std::optional<std::string> handshake(SSL_CTX* server_ctx, X509* cert, EVP_PKEY* key) {
    SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
    if (cert) {
        SSL_CTX_use_certificate(client_ctx, cert);
        SSL_CTX_use_PrivateKey(client_ctx, key);
    }
    SSL* server = SSL_new(server_ctx);
    SSL* client = SSL_new(client_ctx);
    BIO *server_bio = nullptr, *client_bio = nullptr;
    BIO_new_bio_pair(&server_bio, 0, &client_bio, 0);
    SSL_set_bio(server, server_bio, server_bio);
    SSL_set_bio(client, client_bio, client_bio);
    SSL_set_accept_state(server);
    SSL_set_connect_state(client);
    bool server_done = false, failed = false;
    for (int round = 0; round < 20 && !server_done && !failed; ++round) {
        const int c = SSL_do_handshake(client);
        if (c <= 0 && SSL_get_error(client, c) != SSL_ERROR_WANT_READ)
            failed = true;
        const int s = SSL_do_handshake(server);
        if (s == 1)
            server_done = true;
        else if (SSL_get_error(server, s) != SSL_ERROR_WANT_READ)
            failed = true;
    }
    std::optional<std::string> identity;
    if (server_done && !failed)
        identity = peer_identity(server);
    SSL_free(server);
    SSL_free(client);
    SSL_CTX_free(client_ctx);
    ERR_clear_error();
    return identity;
}

} // namespace

TEST_CASE("a context from a matching pair, with the certificate's serial and expiry") {
    pki p;
    auto r = make_tls_context(p.settings());
    REQUIRE_MESSAGE(r.ok(), r.error);
    CHECK(r.serial == "1234");
    CHECK_FALSE(r.not_after.empty());
    CHECK_FALSE(r.expired);
    CHECK(SSL_CTX_get_min_proto_version(r.context->native_handle()) == TLS1_2_VERSION);

    auto t = p.settings();
    t.min_version = fk::config::tls_version::v1_3;
    r = make_tls_context(t);
    REQUIRE(r.ok());
    CHECK(SSL_CTX_get_min_proto_version(r.context->native_handle()) == TLS1_3_VERSION);
}

TEST_CASE("a pair that does not load or match is refused, naming the file") {
    pki p;
    auto other_key = new_key();
    const std::string other = p.dir.key("other.key", other_key.get());

    auto t = p.settings();
    t.key_file = other;
    auto r = make_tls_context(t);
    CHECK_FALSE(r.ok());
    CHECK(r.error.find("tls.key_file '" + other + "'") == 0);

    t = p.settings();
    t.cert_file = p.dir.write("garbage.pem", "not a certificate\n");
    r = make_tls_context(t);
    CHECK_FALSE(r.ok());
    CHECK(r.error.find("not a PEM certificate chain") != std::string::npos);

    t = p.settings();
    t.key_file = p.dir.path.string() + "/missing.key";
    r = make_tls_context(t);
    CHECK(r.error == "tls.key_file '" + *t.key_file + "': cannot read the file");

    t = p.settings(true);
    t.client_ca_file = p.dir.write("empty-ca.pem", "");
    r = make_tls_context(t);
    CHECK_FALSE(r.ok());
    CHECK(r.error.find("tls.client_ca_file") == 0);
}

TEST_CASE("an expired certificate loads, marked expired") {
    pki p;
    auto key = new_key();
    auto cert = new_cert(key.get(), "old", 7, "", p.ca.get(), p.ca_key.get());
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -7200);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), -3600);
    X509_sign(cert.get(), p.ca_key.get(), EVP_sha256());
    auto t = p.settings();
    t.cert_file = p.dir.cert("old.pem", cert.get());
    t.key_file = p.dir.key("old.key", key.get());
    auto r = make_tls_context(t);
    REQUIRE(r.ok());
    CHECK(r.expired);
}

TEST_CASE("the client's identity: the first DNS or URI SAN, else the subject CN") {
    pki p;
    auto r = make_tls_context(p.settings(true));
    REQUIRE(r.ok());
    SSL_CTX* server = r.context->native_handle();

    auto key = new_key();
    auto san = new_cert(key.get(), "cn-ignored", 10, "email:a@b.example,DNS:worker-1.example",
                        p.ca.get(), p.ca_key.get());
    CHECK(handshake(server, san.get(), key.get()) == "worker-1.example");
    auto uri = new_cert(key.get(), "cn-ignored", 11, "URI:spiffe://example.org/w1,DNS:later",
                        p.ca.get(), p.ca_key.get());
    CHECK(handshake(server, uri.get(), key.get()) == "spiffe://example.org/w1");
    auto cn = new_cert(key.get(), "batch-job", 12, "IP:10.0.0.1", p.ca.get(), p.ca_key.get());
    CHECK(handshake(server, cn.get(), key.get()) == "batch-job");

    // mTLS: no certificate, or one from another CA, fails the handshake.
    CHECK_FALSE(handshake(server, nullptr, nullptr));
    auto stranger_ca_key = new_key();
    auto stranger_ca = new_cert(stranger_ca_key.get(), "other CA", 1, "", nullptr, nullptr, true);
    auto stranger = new_cert(key.get(), "stranger", 13, "DNS:stranger", stranger_ca.get(),
                             stranger_ca_key.get());
    CHECK_FALSE(handshake(server, stranger.get(), key.get()));

    // Without mTLS a client certificate is neither asked for nor read: no identity.
    auto plain = make_tls_context(p.settings(false));
    REQUIRE(plain.ok());
    CHECK(handshake(plain.context->native_handle(), san.get(), key.get()) == "");
}

TEST_CASE("handshake failures fall into four classes") {
    namespace ssl_error = boost::asio::ssl::error;
    const auto ssl_code = [](int reason) {
        return boost::system::error_code(static_cast<int>(ERR_PACK(ERR_LIB_SSL, 0, reason)),
                                         boost::asio::error::get_ssl_category());
    };
    CHECK(classify_handshake_error(boost::beast::error::timeout) == tls_failure::timeout);
    CHECK(classify_handshake_error(boost::asio::error::eof) == tls_failure::closed);
    CHECK(classify_handshake_error(boost::asio::error::connection_reset) == tls_failure::closed);
    CHECK(classify_handshake_error(ssl_error::stream_truncated) == tls_failure::closed);
    CHECK(classify_handshake_error(boost::asio::error::operation_aborted) == tls_failure::closed);
    CHECK(classify_handshake_error(ssl_code(SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)) ==
          tls_failure::certificate);
    CHECK(classify_handshake_error(ssl_code(SSL_R_CERTIFICATE_VERIFY_FAILED)) ==
          tls_failure::certificate);
    CHECK(classify_handshake_error(ssl_code(SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED)) ==
          tls_failure::certificate);
    CHECK(classify_handshake_error(ssl_code(SSL_R_TLSV1_ALERT_UNKNOWN_CA)) ==
          tls_failure::certificate);
    CHECK(classify_handshake_error(ssl_code(SSL_R_HTTP_REQUEST)) == tls_failure::protocol);
    CHECK(classify_handshake_error(ssl_code(SSL_R_UNSUPPORTED_PROTOCOL)) == tls_failure::protocol);
    CHECK(to_string(tls_failure::certificate) == "certificate");
}

TEST_CASE("credentials swap the context new connections get; holders keep theirs") {
    pki p;
    auto first = make_tls_context(p.settings()).context;
    auto second = make_tls_context(p.settings()).context;
    tls_credentials creds{first};
    auto held = creds.current();
    CHECK(held == first);
    creds.set(second);
    CHECK(creds.current() == second);
    CHECK(held == first); // a connection's copy is untouched
}
