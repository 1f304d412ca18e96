#!/usr/bin/env python3
"""Scoped credentials (config auth.clients; docs/operations.md, "Scoped credentials";
docs/api.md#scopes), against the real binary on both stores.

Covers: two tenants on one proxy, neither able to read, write, delete or fence the other's
keys or locks by any route or header (GET, HEAD, PUT, DELETE, the fence routes,
Fencing-Lock pointing at the other's lock, transaction ops and their header defaults,
operations), nothing changed by any refusal; listings and floors filtered to what the
caller may read, with exact pages; floors and /metrics only for clients allowed them;
the open probes; logs naming the client and never a token; SIGHUP adding and removing a
client without a restart, and a bad list refused with the old one kept; an mTLS
certificate identity mapped to a client; the config checks.

    FENCEKEEPER_BIN=build/fencekeeper python3 tests/integration/test_scopes.py [FILTER]
"""

import http.client
import json
import os
import signal
import subprocess
import time

import fk
from fk import check, eq

TOKENS = {"alpha": "alpha-t0ken-1", "beta": "beta-t0ken-2", "ops": "ops-t0ken-3",
          "gamma": "gamma-t0ken-4"}


def write_token(d, name, token=None):
    path = os.path.join(d, name + ".token")
    with open(path, "w") as f:
        f.write((TOKENS[name] if token is None else token) + "\n")
    return path


def clients(d, names=("alpha", "beta", "ops")):
    spec = {
        # alpha writes a/ and reads shared/ too; beta writes b/ only; ops writes and reads
        # everything and may raise floors and scrape metrics.
        "alpha": {"write_prefixes": ["a/"], "read_prefixes": ["shared/"]},
        "beta": {"write_prefixes": ["b/"]},
        "ops": {"write_prefixes": [""], "metrics": True, "admin": True},
        "gamma": {"write_prefixes": ["g/"]},
    }
    return [dict(name=n, token_file=write_token(d, n), **spec[n]) for n in names]


def auth(name):
    return {"Authorization": "Bearer " + TOKENS[name]}


def start(store, names=("alpha", "beta", "ops"), **kw):
    d = fk.tmpdir("scopes")
    return store.start(config={"auth": {"clients": clients(d, names)}}, **kw)


def forbidden(resp, what):
    eq(resp.status, 403, what + ": status (%r)" % resp)
    if resp.body:  # HEAD has none
        eq(resp.json().get("error"), "forbidden", what + ": error code")


def wait_reload(p, before):
    """Waits for one more reload outcome line than `before`; returns it."""
    deadline = time.monotonic() + 5
    while True:
        lines = [o for o in p.log_lines()
                 if o.get("msg", "").startswith(("reloaded auth token", "reload failed"))]
        if len(lines) > before:
            return lines[-1]
        check(time.monotonic() < deadline, "no reload line: %s" % p.stderr_text()[-2000:])
        time.sleep(0.05)


def reload_lines(p):
    return len([o for o in p.log_lines()
                if o.get("msg", "").startswith(("reloaded auth token", "reload failed"))])


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

def test_two_tenants_cannot_touch_each_other(store):
    A, B, O = auth("alpha"), auth("beta"), auth("ops")
    with start(store) as p, p.client() as c:
        eq(c.put("a/x", b"alpha", token=10, headers=A).status, 201, "alpha writes its key")
        eq(c.put("b/x", b"beta", token=20, headers=B).status, 201, "beta writes its key")
        eq(c.put("shared/s", b"s", token=1, headers=O).status, 201, "ops writes anywhere")

        # Every route and header that names alpha's key or lock, sent by beta.
        forbidden(c.get("a/x", headers=B), "GET")
        forbidden(c.head("a/x", headers=B), "HEAD")
        forbidden(c.put("a/x", b"evil", token=99, headers=B), "PUT")
        forbidden(c.delete("a/x", token=99, headers=B), "DELETE")
        forbidden(c.request("GET", "/v1/fences/a/x", headers=B), "GET fence")
        forbidden(c.request("HEAD", "/v1/fences/a/x", headers=B), "HEAD fence")
        forbidden(c.put_fence("a/x", 99, headers=B), "PUT fence")
        # Its own key, guarded by (and advancing) alpha's lock: both must be in scope.
        forbidden(c.put("b/y", b"evil", token=99, lock="a/x", headers=B), "Fencing-Lock on PUT")
        forbidden(c.delete("b/x", token=99, lock="a/x", headers=B), "Fencing-Lock on DELETE")
        forbidden(c.operation("credit", 99, "a/x", [1], headers=B), "operation on alpha's lock")
        # Transactions: checked op by op once parsed, before any op runs.
        for ops, lock, what in [
                ([{"op": "put", "key": "b/t", "body": "x", "lock": "a/x"}], None, "put op lock"),
                ([{"op": "put", "key": "b/t", "body": "x"}], "a/x", "Fencing-Lock default"),
                ([{"op": "put", "key": "a/x", "body": "x"}], None, "put op key"),
                ([{"op": "delete", "key": "a/x"}], None, "delete op"),
                ([{"op": "fence", "lock": "a/x"}], None, "fence op"),
                ([{"op": "check", "lock": "a/x"}], None, "check op"),
                ([{"op": "check_version", "key": "a/x", "absent": True}], None, "check_version op"),
                ([{"op": "put", "key": "b/t", "body": "first"},
                  {"op": "fence", "lock": "a/other"}], None, "second op")]:
            r = c.transaction(ops, token=99, lock=lock, headers=B)
            forbidden(r, "transaction: " + what)
            eq(r.json().get("op_index"), len(ops) - 1, what + ": op_index")
        # Floors are for admins; a raise by beta changes nothing.
        forbidden(c.request("PUT", "/v1/floors?prefix=b/", headers=dict(B, **{"Fencing-Token": "5"})),
                  "PUT floor by a non-admin")
        forbidden(c.request("GET", "/metrics", headers=B), "/metrics without metrics: true")

        # Refused from the head: a body still on the wire is never read, and the
        # connection is closed after the 403, as after a 401.
        with p.raw() as raw:
            raw.send_raw(("PUT /v1/resources/a/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                          "Fencing-Token: 99\r\nContent-Length: 1000000\r\n\r\n"
                          % TOKENS["beta"]).encode())
            r = raw.read_response()
            eq(r.status, 403, "403 before the body")
            check(raw.is_closed(), "connection closed after a 403 with a body pending")

        # Nothing moved: alpha's data and fence, and the op beta's transaction put first.
        r = c.get("a/x", headers=A)
        eq((r.status, r.body, r.header("Fencing-Token")), (200, b"alpha", "10"), "alpha's key intact")
        eq(c.request("GET", "/v1/fences/a/x", headers=A).json()["token"], 10, "alpha's fence intact")
        eq(c.get("b/t", headers=B).status, 404, "no op of a refused transaction applied")
        eq(c.get("b/y", headers=B).status, 404, "nothing written under alpha's lock")
        eq(c.request("GET", "/v1/fences/b/x", headers=B).json()["token"], 20, "beta's fence as it was")

        # What each may do: write implies read; read_prefixes read only.
        eq(c.get("shared/s", headers=A).status, 200, "alpha reads shared/")
        forbidden(c.put("shared/s", b"x", token=2, headers=A), "alpha writes shared/")
        forbidden(c.get("shared/s", headers=B), "beta reads shared/")
        r = c.transaction([{"op": "put", "key": "a/t", "body": "t"},
                           {"op": "check_version", "key": "shared/s", "version": 1},
                           {"op": "check", "lock": "shared/s", "token": 1}], token=11, lock="a/x",
                          headers=A)
        eq(r.status, 200, "alpha's own transaction, reading shared/: %r" % r)
        eq(c.request("GET", "/metrics", headers=O).status, 200, "ops scrapes metrics")

        # Unknown token: 401, not 403; the probes stay open.
        eq(c.get("a/x", headers={"Authorization": "Bearer nobody"}).status, 401, "unknown token")
        eq(c.healthz().status, 200, "healthz open")
        eq(c.readyz().status, 200, "readyz open")

        # Logs name the client and never carry a token.
        line = p.wait_log(lambda o: o.get("msg") == "forbidden request" and o.get("client") == "beta")
        check("a/x" in line.get("detail", ""), line)
        p.wait_log(lambda o: o.get("msg") == "forbidden request" and o.get("route") == "transactions"
                   and o.get("client") == "beta")
        text = p.stderr_text()
        for t in TOKENS.values():
            check(t not in text, "a token in the log")


def test_listings_show_only_what_the_caller_may_read(store):
    A, B, O = auth("alpha"), auth("beta"), auth("ops")
    with start(store) as p, p.client() as c:
        for key, h in [("a/1", A), ("a/2", A), ("b/1", B), ("b/2", B), ("shared/1", O),
                       ("z/1", O)]:
            eq(c.put(key, b"v", token=3, headers=h).status, 201, key)

        def listing(h, **q):
            path = "/v1/fences"
            if q:
                path += "?" + "&".join("%s=%s" % kv for kv in q.items())
            r = c.request("GET", path, headers=h)
            eq(r.status, 200, "listing %r: %r" % (q, r))
            return [f["lock"] for f in r.json()["fences"]], r.json()["next"]

        eq(listing(B), (["b/1", "b/2"], None), "beta's listing")
        eq(listing(A), (["a/1", "a/2", "shared/1"], None), "alpha's listing: a/ and shared/")
        eq(listing(O)[0], ["a/1", "a/2", "b/1", "b/2", "shared/1", "z/1"], "ops sees all")
        eq(listing(B, prefix="a/"), ([], None), "beta listing alpha's prefix: empty")
        eq(listing(A, prefix="a/2"), (["a/2"], None), "a narrower prefix inside the scope")
        # Exact pages across alpha's two prefixes.
        pages, after = [], None
        while True:
            q = {"limit": 2}
            if after is not None:
                q["after"] = after
            locks, after = listing(A, **q)
            pages.append(locks)
            if after is None:
                break
            check(len(pages) < 5, "paging does not end: %r" % pages)
        eq(pages, [["a/1", "a/2"], ["shared/1"]], "alpha's pages")

        # Floors: raised by the admin, listed to each tenant over what it may read.
        for prefix in ("a/", "b/", ""):
            r = c.request("PUT", "/v1/floors?prefix=" + prefix,
                          headers=dict(O, **{"Fencing-Token": "5"}))
            eq(r.status, 200, "admin raises floor %r: %r" % (prefix, r))

        def floors(h):
            r = c.request("GET", "/v1/floors", headers=h)
            eq(r.status, 200, "floors")
            return [f["prefix"] for f in r.json()["floors"]]

        eq(floors(B), ["b/"], "beta's floors")
        eq(floors(A), ["a/"], "alpha's floors")
        eq(floors(O), ["", "a/", "b/"], "the admin's floors")


def test_reload_adds_and_removes_clients():
    d = fk.tmpdir("scopes-hup")
    store = fk.file_store()
    with store.start(config={"auth": {"clients": clients(d, ("alpha", "beta"))}}) as p:
        config_path = os.path.join(p.dir, "config.json")
        with p.client() as c:
            eq(c.put("b/1", b"v", token=1, headers=auth("beta")).status, 201, "beta before")
            eq(c.put("g/1", b"v", token=1, headers=auth("gamma")).status, 401, "gamma before")

            def rewrite(names, **change):
                cl = clients(d, names)
                for entry in cl:
                    entry.update(change.get(entry["name"], {}))
                with open(config_path, "w") as f:
                    json.dump(dict(p.config, auth={"clients": cl}), f)
                n = reload_lines(p)
                p.signal(signal.SIGHUP)
                return wait_reload(p, n)

            line = rewrite(("alpha", "gamma"))
            eq(line.get("msg"), "reloaded auth token and log level", line)
            check("2 scoped clients" in line.get("auth", ""), line)
            eq(c.put("g/1", b"v", token=1, headers=auth("gamma")).status, 201, "gamma added")
            eq(c.put("b/1", b"w", token=2, headers=auth("beta")).status, 401, "beta removed")
            eq(c.put("a/1", b"v", token=1, headers=auth("alpha")).status, 201, "alpha kept")

            # A bad list (one token file missing; two clients sharing a token) is refused
            # whole: the old list stays, with alpha's old scope.
            line = rewrite(("alpha", "beta", "gamma"),
                           beta={"token_file": os.path.join(d, "missing.token")},
                           alpha={"write_prefixes": [""]})
            eq(line.get("level"), "error", line)
            check("missing.token" in line.get("error", ""), line)
            dup = os.path.join(d, "dup.token")
            with open(dup, "w") as f:
                f.write(TOKENS["gamma"] + "\n")
            line = rewrite(("alpha", "beta", "gamma"), beta={"token_file": dup})
            eq(line.get("level"), "error", line)
            check("same token" in line.get("error", ""), line)
            text = p.stderr_text()
            check(TOKENS["gamma"] not in text, "a token in the reload error")
            check(p.alive(), "alive after bad reloads")
            eq(c.put("b/2", b"v", token=1, headers=auth("beta")).status, 401, "beta still out")
            forbidden(c.put("z/1", b"v", token=1, headers=auth("alpha")), "alpha's scope kept")
            eq(c.put("g/2", b"v", token=1, headers=auth("gamma")).status, 201, "gamma still in")


def test_mtls_identity_is_a_client():
    import test_tls
    test_tls.OPENSSL = fk.require_tool("openssl")
    ca = test_tls.pki()
    cert = ca.server(0x5001)
    alpha_cert = ca.issue("scoped-alpha", "ignored", 0x5101, san="DNS:alpha.clients.example",
                          client=True)
    nobody_cert = ca.issue("scoped-nobody", "nobody", 0x5102, client=True)
    d = fk.tmpdir("scopes-mtls")
    cl = [{"name": "alpha", "tls_identity": "alpha.clients.example", "write_prefixes": ["a/"]},
          {"name": "beta", "token_file": write_token(d, "beta"), "write_prefixes": ["b/"]}]
    p = test_tls.tls_proxy(cert, config={"tls": {"client_ca_file": ca.ca_crt},
                                         "auth": {"clients": cl}})

    def call(client_cert, method, path, headers=None, body=None):
        conn = http.client.HTTPSConnection(
            "127.0.0.1", p.port, timeout=10,
            context=test_tls.client_context(cert=client_cert))
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            resp = fk.Response(r.status, r.reason, list(r.getheaders()), r.read())
            fk.check_against_spec(method, path, resp, head=method == "HEAD")
            return resp
        finally:
            conn.close()

    with p:
        put = {"Fencing-Token": "1"}
        eq(call(alpha_cert, "PUT", "/v1/resources/a/1", put, b"v").status, 201,
           "the certificate's identity is alpha")
        forbidden(call(alpha_cert, "PUT", "/v1/resources/b/1", put, b"v"), "alpha writes b/")
        eq(call(nobody_cert, "GET", "/v1/resources/a/1").status, 401,
           "a certificate that names no client, without a token")
        # A token, when sent, decides whatever the certificate says.
        eq(call(alpha_cert, "PUT", "/v1/resources/b/1", dict(put, **auth("beta")), b"v").status,
           201, "beta's token over alpha's certificate")
        forbidden(call(nobody_cert, "GET", "/v1/resources/a/1", auth("beta")), "beta reads a/")
        line = p.wait_log(lambda o: o.get("msg") == "forbidden request" and o.get("client") == "alpha")
        check("b/1" in line.get("detail", ""), line)


def test_config_checks():
    d = fk.tmpdir("scopes-cfg")
    tok = write_token(d, "alpha")

    def check_config(config, env=None, args=()):
        path = os.path.join(d, "c.json")
        with open(path, "w") as f:
            json.dump(config, f)
        e = dict(os.environ)
        e.pop("FENCEKEEPER_AUTH_TOKEN", None)
        e.update(env or {})
        r = subprocess.run([fk.require_binary(), "--check-config", "--config", path, *args],
                           capture_output=True, text=True, timeout=60, env=e)
        return r.returncode, r.stdout + r.stderr

    good = {"auth": {"clients": [{"name": "alpha", "token_file": tok, "write_prefixes": ["a/"]}]}}
    eq(check_config(good)[0], 0, "a good list")
    rc, out = check_config(dict(good, auth_token_file=tok))
    eq(rc, 2, "clients and a token file")
    check("cannot be combined" in out, out)
    rc, out = check_config(good, env={"FENCEKEEPER_AUTH_TOKEN": "x"})
    eq(rc, 2, "clients and the environment's token")
    check("FENCEKEEPER_AUTH_TOKEN" in out, out)
    rc, out = check_config({"auth": {"clients": [{"name": "m", "tls_identity": "m.example"}]}})
    eq(rc, 2, "tls_identity without mTLS")
    check("client_ca_file" in out, out)
    rc, out = check_config({"auth": {"clients": [
        {"name": "x", "token_file": tok}, {"name": "y", "token_file": write_token(d, "beta", TOKENS["alpha"])}]}})
    eq(rc, 2, "two clients with one token")
    check("same token" in out and TOKENS["alpha"] not in out, out)
    rc, out = check_config({"auth": {"clients": [{"name": "x", "token_file": tok,
                                                  "write_prefixes": ["a/"], "writes": []}]}})
    eq(rc, 2, "unknown key")
    check("writes" in out, out)


def main():
    fk.main(globals())


if __name__ == "__main__":
    main()
