#!/usr/bin/env python3
"""TLS and mTLS on the listener (docs/operations.md, "TLS and mTLS"), against the real
binary: curl and Python's ssl module as clients, certificates made at test time with
`openssl req` / `openssl x509` in a temp dir (no key is committed).

Covers: HTTPS with curl and keep-alive; tls.min_version; mTLS accepted with a good client
certificate (its identity in the log) and refused without one or with one from another
CA; an expired server certificate refused by the client; SIGHUP swapping the served
certificate (by serial) without dropping an open connection, and keeping the old one when
the new pair is bad; plain HTTP on the TLS port getting no HTTP answer; a silent client
closed at limits.handshake_timeout_ms while it counts against limits.max_connections;
the handshake counters; the config checks.

    FENCEKEEPER_BIN=build/fencekeeper python3 tests/integration/test_tls.py [FILTER]
"""

import contextlib
import http.client
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time

import fk
from fk import check, eq

OPENSSL = None
CURL = None


# ---------------------------------------------------------------------------
# Certificates, made with the openssl CLI
# ---------------------------------------------------------------------------

def openssl(*args, cwd):
    r = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fk.fail("openssl %s failed: %s" % (" ".join(args), r.stderr[-2000:]))
    return r.stdout


class Pki:
    """A temp dir with a CA and helpers to issue certificates from it (P-256 keys: fast)."""

    def __init__(self, name="ca"):
        self.dir = fk.tmpdir("pki-" + name)
        self.ca_crt = os.path.join(self.dir, "ca.crt")
        self.ca_key = os.path.join(self.dir, "ca.key")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", self.ca_key, "-out", self.ca_crt, "-days", "30",
                "-subj", "/CN=fencekeeper test %s" % name, cwd=self.dir)

    def issue(self, name, cn, serial, san=None, days=30, client=False):
        """Writes NAME.crt and NAME.key signed by this CA; returns (crt, key) paths."""
        key = os.path.join(self.dir, name + ".key")
        csr = os.path.join(self.dir, name + ".csr")
        crt = os.path.join(self.dir, name + ".crt")
        ext = os.path.join(self.dir, name + ".ext")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", csr, "-subj", "/CN=" + cn, cwd=self.dir)
        lines = ["basicConstraints=CA:FALSE",
                 "extendedKeyUsage=" + ("clientAuth" if client else "serverAuth")]
        if san:
            lines.append("subjectAltName=" + san)
        with open(ext, "w") as f:
            f.write("\n".join(lines) + "\n")
        # -days -1: a certificate that expired yesterday.
        openssl("x509", "-req", "-in", csr, "-CA", self.ca_crt, "-CAkey", self.ca_key,
                "-set_serial", str(serial), "-days", str(days), "-extfile", ext, "-out", crt,
                cwd=self.dir)
        return crt, key

    def server(self, serial, days=30, name=None):
        return self.issue(name or "server-%d" % serial, "localhost", serial,
                          san="DNS:localhost,IP:127.0.0.1", days=days)


_pki = None


def pki():
    global _pki
    if _pki is None:
        _pki = Pki("main")
    return _pki


# ---------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------

def client_context(ca=None, cert=None, max_version=None):
    ctx = ssl.create_default_context(cafile=ca or pki().ca_crt)
    if cert:
        ctx.load_cert_chain(*cert)
    if max_version:
        ctx.maximum_version = max_version
    return ctx


def https(p, ctx=None, timeout=10):
    """An http.client connection to the proxy over TLS (the certificate names 127.0.0.1)."""
    return http.client.HTTPSConnection("127.0.0.1", p.port, timeout=timeout,
                                       context=ctx or client_context())


def get(p, path, ctx=None, headers=None):
    c = https(p, ctx)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def handshake(p, ctx):
    """A TLS connection to the proxy; returns the ssl socket (caller closes)."""
    sock = socket.create_connection(("127.0.0.1", p.port), 10)
    try:
        return ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    except BaseException:
        sock.close()
        raise


def served_serial(p):
    with contextlib.closing(handshake(p, client_context())) as s:
        return int(s.getpeercert()["serialNumber"], 16)


def no_http_answer(p, ctx):
    """The handshake or the first request fails: no HTTP response comes back. TLS 1.3
    finishes the client's side of the handshake before the server has judged the client
    certificate, so the refusal may show only at the first read."""
    try:
        s = handshake(p, ctx)
    except (ssl.SSLError, ConnectionError, OSError):
        return True
    with contextlib.closing(s):
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = s.recv(4096)
        except (ssl.SSLError, ConnectionError, OSError):
            return True
        return not data.startswith(b"HTTP/")


def metrics(p, ctx=None, token=None):
    """{(name, labels-string): value} of the counters this file looks at."""
    status, body = get(p, "/metrics", ctx,
                       headers={"Authorization": "Bearer " + token} if token else None)
    eq(status, 200, "GET /metrics over TLS")
    out = {}
    for line in body.decode().splitlines():
        m = re.match(r"^(fencekeeper_(?:tls_\w+|connections_rejected_total|open_connections))"
                     r"(\{[^}]*\})? (\S+)$", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def failures(reason):
    return 'fencekeeper_tls_handshake_failures_total{reason="%s"}' % reason


COMPLETED = "fencekeeper_tls_handshakes_total"


def tls_proxy(cert, config=None, args=(), **kw):
    crt, key = cert
    return fk.file_store().start(config=config,
                                 args=["--tls-cert", crt, "--tls-key", key, *args], **kw)


def wait_for(pred, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    fk.fail("timed out waiting for " + what)


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

def test_curl_over_tls_and_keep_alive():
    cert = pki().server(0x1001)
    with tls_proxy(cert) as p:
        url = "https://127.0.0.1:%d" % p.port
        r = subprocess.run([CURL, "-sS", "--cacert", pki().ca_crt, "-X", "PUT", "-H", "Fencing-Token: 1", "-H", "Fencing-Lock: l",
                            "--data-binary", "over tls", "-o", "/dev/null",
                            "-w", "%{http_code}", url + "/v1/resources/k"],
                           capture_output=True, text=True, timeout=60)
        eq((r.returncode, r.stdout), (0, "201"), "curl PUT (stderr: %s)" % r.stderr)
        r = subprocess.run([CURL, "-sS", "--cacert", pki().ca_crt, url + "/v1/resources/k",
                            url + "/healthz", "-w", "\n%{num_connects}"],
                           capture_output=True, text=True, timeout=60)
        eq(r.returncode, 0, "curl GET (stderr: %s)" % r.stderr)
        check(r.stdout.startswith("over tls"), "body read back over TLS: %r" % r.stdout)
        # Two requests, one connection: keep-alive works over TLS.
        eq(r.stdout.rsplit("\n", 1)[-1], "0", "curl's second transfer reused the connection")

        # Without the CA, curl refuses the (unknown) certificate: TLS is really on.
        r = subprocess.run([CURL, "-sS", url + "/healthz"],
                           capture_output=True, text=True, timeout=60)
        eq(r.returncode, 60, "curl without the CA: peer certificate cannot be verified")

        with contextlib.closing(handshake(p, client_context())) as s:
            check(s.version() in ("TLSv1.2", "TLSv1.3"), s.version())
        m = metrics(p)
        check(m[COMPLETED] >= 3, "handshakes counted: %r" % m)
        eq(m[failures("certificate")], 1, "the curl without the CA counted")
        line = p.wait_log(lambda o: o.get("msg") == "listening")
        eq(line.get("tls"), True, "listening line says tls")
        eq(line.get("tls_serial"), "1001", "listening line names the serial")


def read_http_response(s):
    """One response (Content-Length framed) from a socket; (status, headers text, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            fk.fail("connection closed before the head: %r" % data[:200])
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    n = int(m.group(1)) if m else 0
    while len(rest) < n:
        chunk = s.recv(65536)
        if not chunk:
            fk.fail("connection closed in the body")
        rest += chunk
    return int(head.split(b" ", 2)[1]), head.decode(), rest[:n], rest[n:]


def test_large_bodies_pipelining_and_error_close_over_tls():
    cert = pki().server(0x100D)
    with tls_proxy(cert, config={"limits": {"max_body_bytes": 300000}}) as p:
        body = os.urandom(200000)
        c = https(p)
        c.request("PUT", "/v1/resources/big", body=body,
                  headers={"Fencing-Token": "1", "Fencing-Lock": "l"})
        r = c.getresponse()
        eq(r.status, 201, "PUT of 200 KB over TLS")
        r.read()
        # A response far larger than one TLS record (16 KiB), on the same connection.
        c.request("GET", "/v1/resources/big")
        r = c.getresponse()
        eq((r.status, r.read() == body), (200, True), "GET of 200 KB over TLS")
        c.close()

        # Two pipelined requests in one TLS record, answered in order.
        with contextlib.closing(handshake(p, client_context())) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: one\r\n\r\n"
                      b"GET /v1/resources/big HTTP/1.1\r\nHost: x\r\nX-Request-Id: two\r\n\r\n")
            st1, h1, _, rest = read_http_response(s)
            check("one" in h1 and st1 == 200, h1)
            st2, h2, b2, _ = read_http_response(_Prefixed(s, rest))
            check("two" in h2 and st2 == 200 and b2 == body, h2)

        # An error that closes the connection (413 with the body still on the wire): the
        # answer arrives whole, then close_notify and the close.
        with contextlib.closing(handshake(p, client_context())) as s:
            s.sendall(b"PUT /v1/resources/x HTTP/1.1\r\nHost: x\r\nFencing-Token: 1\r\n"
                      b"Content-Length: 400000\r\n\r\n" + b"a" * 65536)
            st, h, _, _ = read_http_response(s)
            eq(st, 413, "declared body over the limit")
            check("close" in h.lower(), h)
            s.settimeout(5)
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                eq(s.recv(100), b"", "closed after the 413")


class _Prefixed:
    """A socket whose first reads return `prefix` (bytes already read past a response)."""

    def __init__(self, sock, prefix):
        self.sock, self.prefix = sock, prefix

    def recv(self, n):
        if self.prefix:
            out, self.prefix = self.prefix[:n], self.prefix[n:]
            return out
        return self.sock.recv(n)


def test_sigterm_drains_tls_connections():
    cert = pki().server(0x100E)
    p = tls_proxy(cert)
    with p:
        idle = https(p)
        idle.request("GET", "/healthz")
        idle.getresponse().read()
        handshaking = socket.create_connection(("127.0.0.1", p.port), 10)
        try:
            time.sleep(0.1)
            t0 = time.monotonic()
            p.sigterm()
            eq(p.wait(15), 0, "exit status after a drain")
            check(time.monotonic() - t0 < 5, "an idle TLS connection and a handshake in "
                  "progress do not hold the drain")
        finally:
            handshaking.close()
            idle.close()


def test_min_version_1_3_refuses_1_2():
    cert = pki().server(0x1002)
    with tls_proxy(cert, config={"tls": {"min_version": "1.3"}}) as p:
        check(no_http_answer(p, client_context(max_version=ssl.TLSVersion.TLSv1_2)),
              "a TLS 1.2 client got an answer from a 1.3-only listener")
        with contextlib.closing(handshake(p, client_context())) as s:
            eq(s.version(), "TLSv1.3", "negotiated version")
        eq(metrics(p)[failures("protocol")], 1, "protocol failure counted")
    # The default accepts 1.2.
    with tls_proxy(cert) as p:
        with contextlib.closing(handshake(p, client_context(max_version=ssl.TLSVersion.TLSv1_2))) as s:
            eq(s.version(), "TLSv1.2", "TLS 1.2 accepted by default")


def test_mtls_accepts_good_client_and_refuses_others():
    ca = pki()
    other = Pki("other")
    cert = ca.server(0x1003)
    good = ca.issue("client-san", "ignored-cn", 0x2001, san="DNS:worker-1.example", client=True)
    cn_only = ca.issue("client-cn", "batch-job", 0x2002, client=True)
    stranger = other.issue("stranger", "stranger", 0x3001, client=True)
    p = tls_proxy(cert, config={"tls": {"client_ca_file": ca.ca_crt}}, log_level="debug",
                  env={"FENCEKEEPER_AUTH_TOKEN": "s3cret"})
    with p:
        status, _ = get(p, "/healthz", client_context(cert=good))
        eq(status, 200, "good client certificate")
        line = p.wait_log(lambda o: o.get("msg") == "TLS handshake completed"
                          and o.get("client") == "worker-1.example")
        check(line.get("protocol", "").startswith("TLS"), line)
        # The identity is the SAN; without a DNS/URI SAN, the subject CN.
        status, _ = get(p, "/healthz", client_context(cert=cn_only))
        eq(status, 200, "client certificate without SAN")
        p.wait_log(lambda o: o.get("msg") == "TLS handshake completed"
                   and o.get("client") == "batch-job")
        # It is on the request's log lines too (Part 2 makes it the caller's identity).
        status, _ = get(p, "/v1/fences/x", client_context(cert=good),
                        headers={"Authorization": "Bearer wrong", "X-Request-Id": "mtls-401"})
        eq(status, 401, "mTLS does not replace the bearer token when one is set")
        line = p.wait_log(lambda o: o.get("msg") == "unauthorized request"
                          and o.get("request_id") == "mtls-401")
        eq(line.get("client"), "worker-1.example", "client identity on the request's log line")

        before = metrics(p, client_context(cert=good), token="s3cret")
        check(no_http_answer(p, client_context()), "no client certificate was answered")
        check(no_http_answer(p, client_context(cert=stranger)),
              "a certificate from another CA was answered")
        # A client that does not trust our CA either: still no answer.
        check(no_http_answer(p, client_context(ca=other.ca_crt, cert=stranger)),
              "a client of another PKI was answered")
        wait_for(lambda: metrics(p, client_context(cert=good), token="s3cret")[failures("certificate")]
                 >= before[failures("certificate")] + 3, what="certificate failures counted")
        line = p.wait_log(lambda o: o.get("msg") == "TLS handshake failed"
                          and o.get("reason") == "certificate")
        check(line.get("peer", "").startswith("127.0.0.1:"), line)
        check(p.alive(), "the proxy survived")


def test_expired_certificate_is_refused_by_clients():
    cert = pki().server(0x1004, days=-1, name="expired")
    with tls_proxy(cert) as p:
        line = p.wait_log(lambda o: o.get("msg") == "the TLS certificate has expired")
        eq(line.get("serial"), "1004", "expiry warning names the certificate")
        r = subprocess.run([CURL, "-sS", "--cacert", pki().ca_crt,
                            "https://127.0.0.1:%d/healthz" % p.port],
                           capture_output=True, text=True, timeout=60)
        eq(r.returncode, 60, "curl refuses an expired certificate (stderr: %s)" % r.stderr)
        check("expired" in r.stderr, r.stderr)
        try:
            handshake(p, client_context()).close()
            fk.fail("python's ssl accepted an expired certificate")
        except ssl.SSLCertVerificationError as e:
            check("expired" in str(e), str(e))
        # Counted from the client's alert; scraped with verification off.
        loose = ssl.create_default_context()
        loose.check_hostname = False
        loose.verify_mode = ssl.CERT_NONE
        wait_for(lambda: metrics(p, loose)[failures("certificate")] >= 2,
                 what="the clients' refusals counted")


def test_sighup_swaps_certificate_and_keeps_old_on_bad_pair():
    ca = pki()
    d = fk.tmpdir("served")
    crt, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")

    def install(pair):
        shutil.copyfile(pair[0], crt)
        shutil.copyfile(pair[1], key)

    install(ca.server(0x1005))
    with tls_proxy((crt, key)) as p:
        eq(served_serial(p), 0x1005, "first certificate")
        # A keep-alive connection opened before the reload.
        kept = https(p)
        kept.request("GET", "/healthz")
        resp = kept.getresponse()
        eq(resp.status, 200, "before the reload")
        resp.read()

        install(ca.server(0x1006))
        p.signal(signal.SIGHUP)
        line = p.wait_log(lambda o: o.get("msg") == "reloaded TLS certificate")
        eq(line.get("serial"), "1006", "reload line names the new serial")
        eq(served_serial(p), 0x1006, "new handshakes get the new certificate")
        # The old connection was not dropped, and still speaks with the old certificate.
        kept.request("GET", "/healthz")
        resp = kept.getresponse()
        eq(resp.status, 200, "the connection opened before the reload still works")
        resp.read()
        eq(int(kept.sock.getpeercert()["serialNumber"], 16), 0x1005, "old connection's cert")
        kept.close()

        # A bad pair: the certificate of one key with another key.
        other_crt, _ = ca.server(0x1007)
        _, other_key = ca.server(0x1008)
        install((other_crt, other_key))
        p.signal(signal.SIGHUP)
        line = p.wait_log(lambda o: o.get("level") == "error"
                          and o.get("msg", "").startswith("reload failed"))
        check("tls.key_file" in line.get("error", ""), line)
        eq(served_serial(p), 0x1006, "a bad pair keeps the old certificate")
        # Not a certificate at all.
        with open(crt, "w") as f:
            f.write("not a certificate\n")
        p.signal(signal.SIGHUP)
        wait_for(lambda: len([o for o in p.log_lines() if o.get("msg", "").startswith(
            "reload failed")]) >= 2, what="second reload failure")
        eq(served_serial(p), 0x1006, "garbage keeps the old certificate")
        check(p.alive(), "alive after bad reloads")


def test_plain_http_on_tls_port_gets_no_http_answer():
    cert = pki().server(0x1009)
    with tls_proxy(cert) as p:
        with socket.create_connection(("127.0.0.1", p.port), 10) as s:
            s.settimeout(10)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = b""
            with contextlib.suppress(ConnectionError, socket.timeout):
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            check(b"HTTP/" not in data, "plain HTTP got an HTTP answer: %r" % data[:200])
        wait_for(lambda: metrics(p)[failures("protocol")] >= 1, what="protocol failure counted")


def test_silent_client_closed_at_handshake_deadline_and_counts_as_connection():
    cert = pki().server(0x100A)
    config = {"limits": {"handshake_timeout_ms": 700, "max_connections": 2}}
    with tls_proxy(cert, config=config) as p:
        silent = [socket.create_connection(("127.0.0.1", p.port), 10) for _ in range(2)]
        try:
            time.sleep(0.2)
            # Both places are taken by handshakes that never start: a third connection is
            # closed at once, whatever it would have said.
            with socket.create_connection(("127.0.0.1", p.port), 10) as third:
                third.settimeout(5)
                with contextlib.suppress(ConnectionError):
                    eq(third.recv(100), b"", "the third connection is closed at accept")
            t0 = time.monotonic()
            for s in silent:
                s.settimeout(10)
                with contextlib.suppress(ConnectionError):
                    eq(s.recv(100), b"", "a silent client is closed")
            waited = time.monotonic() - t0
            check(waited < 3.0, "closed at the handshake deadline, not later (%.1fs)" % waited)
        finally:
            for s in silent:
                s.close()
        # The places are free again.
        wait_for(lambda: get(p, "/healthz")[0] == 200, what="a TLS client served again")
        m = metrics(p)
        eq(m[failures("timeout")], 2, "handshake timeouts counted")
        check(m["fencekeeper_connections_rejected_total"] >= 1, "the third was rejected: %r" % m)


def test_config_checks():
    ca = pki()
    crt, key = ca.server(0x100B)
    other_crt, _ = ca.server(0x100C)

    def check_config(*args, config=None):
        cmd = [fk.require_binary(), "--check-config", *args]
        if config is not None:
            path = os.path.join(fk.tmpdir("cfg"), "c.json")
            with open(path, "w") as f:
                f.write(config)
            cmd += ["--config", path]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout + r.stderr

    rc, out = check_config("--tls-cert", crt, "--tls-key", key)
    eq((rc, out.strip()), (0, "config ok"), "a good pair")
    rc, out = check_config("--tls-cert", crt)
    eq(rc, 2, "certificate without key")
    check("tls.key_file" in out, out)
    rc, out = check_config("--tls-key", key)
    eq(rc, 2, "key without certificate")
    rc, out = check_config(config='{"tls": {"client_ca_file": "%s"}}' % ca.ca_crt)
    eq(rc, 2, "client CA without certificate")
    check("client_ca_file" in out, out)
    rc, out = check_config("--tls-cert", other_crt, "--tls-key", key)
    eq(rc, 2, "mismatched pair")
    check("not the private key" in out or "tls.key_file" in out, out)
    rc, out = check_config("--tls-cert", crt, "--tls-key", key + ".missing")
    eq(rc, 2, "missing key file")
    check("cannot read" in out, out)
    rc, out = check_config("--tls-cert", crt, "--tls-key", key,
                           config='{"tls": {"min_version": "1.1"}}')
    eq(rc, 2, "TLS 1.1")
    check("tls.min_version" in out, out)
    rc, out = check_config("--tls-cert", crt, "--tls-key", key,
                           config='{"tls": {"client_ca_file": "%s"}}' % crt)
    eq((rc, out.strip()), (0, "config ok"), "any PEM bundle is a CA bundle")


def main():
    global OPENSSL, CURL
    OPENSSL = fk.require_tool("openssl")
    CURL = fk.require_tool("curl")
    fk.main(globals())


if __name__ == "__main__":
    main()
