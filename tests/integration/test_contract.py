#!/usr/bin/env python3
"""The HTTP contract (docs/api.md) checked through the real binary over real sockets, once per store
(file always; Postgres when FK_TEST_PG_URL is set). Run directly or via ctest:

    FENCEKEEPER_BIN=build/fencekeeper python3 tests/integration/test_contract.py [FILTER]
"""

import json
import os
import random
import re
import socket
import threading
import time
import urllib.parse

import fk
from fk import check, eq, expect_error, expect_status

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")
MAX_TOKEN = 9223372036854775807


def start(store, config=None, **kw):
    p = store.start(config=config, **kw)
    p.wait_ready()
    return p


def assert_absent(p, key, what=""):
    r = p.get(key)
    expect_error(r, 404, "not_found", what or ("GET %s after a rejected write" % key))


def assert_no_fence(p, lock, what=""):
    r = p.fence(lock)
    expect_error(r, 404, "not_found", what or ("fence %s after a rejected write" % lock))


def assert_fence(p, lock, token, what=""):
    r = p.fence(lock)
    expect_status(r, 200, what or ("GET fence %s" % lock))
    b = r.json()
    eq(b.get("lock"), lock, "fence lock")
    eq(b.get("token"), token, what or ("fence token of %s" % lock))
    check(isinstance(b.get("updated_at"), str) and RFC3339_UTC.match(b["updated_at"]),
          "updated_at is not RFC 3339 UTC: %r" % b.get("updated_at"))
    return b


def raw_put(p, path, token_headers, body=b"x", extra=()):
    """A PUT over a raw socket with exactly the given header lines."""
    with p.raw() as c:
        return c.request("PUT", path, headers=list(token_headers) + list(extra), body=body)


# ---------------------------------------------------------------------------
# Writes, reads, versions
# ---------------------------------------------------------------------------

def test_put_get_head(store):
    p = start(store)
    key = "reports/2026-11-29.csv"
    r = p.put(key, b"a,b\n1,2\n", token=5, content_type="text/csv")
    expect_status(r, 201, "first PUT")
    eq(r.json(), {"key": key, "lock": key, "token": 5, "version": 1}, "201 body")
    eq(r.etag, '"1"', "ETag of first PUT")

    g = p.get(key)
    expect_status(g, 200, "GET")
    eq(g.body, b"a,b\n1,2\n", "GET body")
    eq((g.header("Content-Type") or "").split(";")[0], "text/csv", "GET Content-Type")
    eq(g.etag, '"1"', "GET ETag")
    eq(g.header("Fencing-Token"), "5", "GET Fencing-Token")
    eq(g.header("Fencing-Lock"), key, "GET Fencing-Lock (defaults to the key)")

    h = p.head(key)
    expect_status(h, 200, "HEAD")
    eq(h.body, b"", "HEAD body")
    eq(h.etag, '"1"', "HEAD ETag")
    eq(h.header("Fencing-Token"), "5", "HEAD Fencing-Token")
    eq(h.header("Fencing-Lock"), key, "HEAD Fencing-Lock")
    eq((h.header("Content-Type") or "").split(";")[0], "text/csv", "HEAD Content-Type")

    # Replace with the same token (t >= fence is accepted): 200, version 2.
    r = p.put(key, b"new", token=5, content_type="text/plain")
    expect_status(r, 200, "replace with equal token")
    eq(r.json(), {"key": key, "lock": key, "token": 5, "version": 2}, "200 body")
    eq(r.etag, '"2"', "ETag after replace")
    r = p.put(key, b"newer", token=6)
    expect_status(r, 200, "replace with higher token")
    eq(r.json()["version"], 3, "version after third write")
    g = p.get(key)
    eq((g.status, g.body, g.etag, g.header("Fencing-Token")), (200, b"newer", '"3"', "6"), "GET after replace")
    assert_fence(p, key, 6)


def test_binary_and_empty_bodies(store):
    p = start(store)
    blob = bytes(range(256)) * 64 + b"\x00\r\n\r\n"
    expect_status(p.put("bin/blob", blob, token=1, content_type="application/octet-stream"), 201)
    g = p.get("bin/blob")
    eq(g.body, blob, "binary body round trip")
    expect_status(p.put("bin/empty", b"", token=1), 201, "empty body")
    g = p.get("bin/empty")
    eq((g.status, g.body), (200, b""), "empty body round trip")


def test_chunked_upload(store):
    p = start(store)
    with p.raw() as c:
        body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        r = c.request("PUT", "/v1/resources/chunked", headers=[
            ("Fencing-Token", "3"), ("Transfer-Encoding", "chunked"), ("Content-Type", "text/plain")], body=body)
        expect_status(r, 201, "chunked PUT")
    eq(p.get("chunked").body, b"hello world", "chunked body stored decoded")


def test_unicode_and_escaped_keys(store):
    p = start(store)
    key = "ünïcødé/日本/a b+c%d"
    r = p.put(key, b"u", token=1)
    expect_status(r, 201, "unicode key")
    eq(r.json()["key"], key, "key in body is the decoded name")
    g = p.get(key)
    eq((g.status, g.body), (200, b"u"), "GET unicode key")
    # A 1024-byte key is the longest allowed.
    long_key = "k" * 1024
    expect_status(p.put(long_key, b"l", token=1), 201, "1024-byte key")
    eq(p.get(long_key).body, b"l", "GET 1024-byte key")


def test_delete(store):
    p = start(store)
    key = "del/me"
    expect_status(p.put(key, b"v1", token=10), 201)
    expect_status(p.put(key, b"v2", token=10), 200)
    r = p.delete(key, token=11)
    expect_status(r, 204, "DELETE")
    eq(r.body, b"", "204 has no body")
    expect_error(p.get(key), 404, "not_found", "GET after DELETE")
    h = p.head(key)
    eq((h.status, h.body), (404, b""), "HEAD after DELETE")
    # The fence outlives the data.
    assert_fence(p, key, 11, "fence after DELETE")
    # A stale write after the delete is still rejected.
    expect_error(p.put(key, b"zombie", token=10), 409, "stale_token", "stale PUT after DELETE")
    assert_absent(p, key)
    # Recreate: 201, version continues the count (not reset to 1).
    r = p.put(key, b"v3", token=12)
    expect_status(r, 201, "PUT after DELETE")
    v = r.json()["version"]
    check(v == 3, "version after delete must continue the count (a delete keeps the version, so 3), got %r" % v)
    eq(r.etag, '"%d"' % v, "ETag after recreate")
    # DELETE of a missing key checks and advances the fence and answers 204.
    r = p.delete("never/was", token=7)
    expect_status(r, 204, "DELETE missing key")
    assert_fence(p, "never/was", 7, "DELETE of missing key advances the fence")
    expect_error(p.delete("never/was", token=6), 409, "stale_token", "stale DELETE of missing key")
    assert_fence(p, "never/was", 7)


def test_stale_token_rejected_and_logged(store):
    p = start(store)
    key, lock = "stale/key", "stale-lock"
    r = p.put(key, b"good", token=100, lock=lock, content_type="text/plain")
    expect_status(r, 201)
    etag = r.etag
    r = p.put(key, b"zombie", token=99, lock=lock, content_type="text/evil")
    b = expect_error(r, 409, "stale_token", "stale PUT")
    eq(b.get("lock"), lock, "409 lock")
    eq(b.get("token"), 99, "409 token (sent)")
    eq(b.get("current_token"), 100, "409 current_token (the fence)")
    g = p.get(key)
    eq((g.status, g.body, g.etag, g.header("Fencing-Token")), (200, b"good", etag, "100"),
       "nothing written by the stale PUT")
    eq((g.header("Content-Type") or "").split(";")[0], "text/plain", "content type unchanged")
    assert_fence(p, lock, 100, "fence unchanged")
    # Stale DELETE: rejected, key still there.
    expect_error(p.delete(key, token=1, lock=lock), 409, "stale_token", "stale DELETE")
    eq(p.get(key).body, b"good", "stale DELETE deleted nothing")
    # Token 0 is valid and is stale here.
    expect_error(p.put(key, b"z", token=0, lock=lock), 409, "stale_token", "token 0")

    # One JSON log line per rejected write: lock, key, token, current fence, peer.
    def vals(obj):
        out = []
        for v in obj.values():
            if isinstance(v, dict):
                out += vals(v)
            else:
                out.append(v)
        return out

    def is_reject(obj):
        v = vals(obj)
        return (lock in v and key in v and (99 in v or "99" in v) and (100 in v or "100" in v)
                and any(isinstance(x, str) and "127.0.0.1" in x for x in v))

    line = p.wait_log(is_reject)
    check(all(not isinstance(v, str) or "zombie" not in v for v in vals(line)), "log holds no body")


# What changes from run to run in a shown answer: the generated request id, the times.
README_MASKS = (r"(?<=X-Request-Id: )[0-9a-f]{16}", r'(?<="updated_at":")[^"]+')
# ... and in a shown log line: the time, the client's port, the request id.
LOG_VARIES = ("ts", "peer", "request_id")


def readme_stale_log_line(p):
    """The README's stale-write story run as written on a fresh file store; returns the
    log line the README shows and the one the binary wrote for the 409."""
    curl = fk.require_tool("curl")
    blocks = fk.doc_block("README.md", "stale-example")
    eq([lang for lang, _ in blocks], ["console"] * 4 + ["json"], "the README story's blocks")
    ran = []
    for _, text in blocks[:4]:
        ran += fk.run_console_block(p, text, curl, exact=True, masks=README_MASKS)
    stale = [out for _, out in ran if out.startswith("HTTP/1.1 409")]
    eq(len(stale), 1, "one 409 in the story")
    request_id = re.search(r"X-Request-Id: (\S+)", stale[0]).group(1)
    shown = json.loads(blocks[4][1])
    got = p.wait_log(lambda o: o.get("request_id") == request_id)
    return shown, got


def test_readme_stale_write_story():
    """README's "A stale write, rejected", run as written: every answer byte for byte (the
    request ids and times aside), and the log line it shows is the binary's: the same
    fields in the same order, the same values but for the time, the port and the id."""
    p = start(fk.file_store())
    shown, got = readme_stale_log_line(p)
    eq(list(shown), list(got), "the README's log line: its fields, in order")
    eq({k: v for k, v in shown.items() if k not in LOG_VARIES},
       {k: v for k, v in got.items() if k not in LOG_VARIES}, "the README's log line: values")
    # The id it shows is the one of the 409 it shows.
    readme = open(os.path.join(fk.REPO, "README.md")).read()
    check("X-Request-Id: %s\n" % shown["request_id"] in readme, "the log line's request_id "
          "is the shown 409's X-Request-Id")

    # docs/configuration.md's example line is the same kind of line (no floor, no client):
    # the same fields in the same order, with numbers that add up.
    text = open(os.path.join(fk.REPO, "docs", "configuration.md")).read()
    lines = [json.loads(l) for l in re.findall(r"^(\{.*\})$", text, re.M)
             if '"rejected stale write"' in l]
    eq(len(lines), 1, "configuration.md's stale-rejection line")
    ex = lines[0]
    eq(list(ex), list(got), "configuration.md's log line: its fields, in order")
    eq((ex["current_token"], ex["gap"]), (ex["fence"], ex["fence"] - ex["token"]),
       "configuration.md's log line: fence, current_token and gap agree")
    p.stop()


def test_readme_run_line_as_written():
    """The line that README's "Tests" and this file's docstring give to run one integration
    test by hand works as written: from the repository root, FENCEKEEPER_BIN relative to
    it. (The proxies run in temp directories; the harness resolves the path.)"""
    readme = open(os.path.join(fk.REPO, "README.md")).read()
    shown = re.findall(r"^(FENCEKEEPER_BIN=\S+ python3 tests/integration/test_contract\.py .*)$",
                       readme, re.M)
    shown += [l.strip() for l in __doc__.splitlines() if "FENCEKEEPER_BIN=" in l]
    eq(len(shown), 2, "the README's line and the docstring's")
    rel = os.path.relpath(fk.binary(), fk.REPO)
    env = {k: v for k, v in os.environ.items()
           if k not in ("FENCEKEEPER_BIN", "FK_TEST_FILTER", "FK_TEST_PG_URL", "FK_REQUIRE_SERVICES")}
    for line in shown:
        check(line.startswith("FENCEKEEPER_BIN=build/fencekeeper "), "a relative path: %r" % line)
        # Only the filter is filled in (one quick test), and the binary's path when the
        # binary under test is another build's.
        cmd = re.sub(r"\[\w+\]$", "test_missing_token", line).replace("build/fencekeeper", rel, 1)
        got = fk.subprocess.run(["bash", "-c", cmd], cwd=fk.REPO, env=env, capture_output=True,
                                text=True, timeout=120)
        eq(got.returncode, 0, "%s: exit status; output:\n%s%s" % (cmd, got.stdout, got.stderr))
        check(re.search(r"^1 passed, 0 failed", got.stdout, re.M),
              "%s ran one test: %s" % (cmd, got.stdout))


def test_shared_lock_guards_many_keys(store):
    p = start(store)
    expect_status(p.put("job/a", b"a", token=5, lock="job"), 201)
    r = p.put("job/b", b"b", token=4, lock="job")
    b = expect_error(r, 409, "stale_token", "lower token on another key of the same lock")
    eq((b.get("lock"), b.get("token"), b.get("current_token")), ("job", 4, 5), "409 body")
    assert_absent(p, "job/b")
    expect_status(p.put("job/b", b"b", token=5, lock="job"), 201)
    g = p.get("job/b")
    eq(g.header("Fencing-Lock"), "job", "GET Fencing-Lock")
    assert_fence(p, "job", 5)
    assert_no_fence(p, "job/a", "no fence is created for the key's own name")


def test_lock_mismatch(store):
    p = start(store)
    expect_status(p.put("owned", b"v", token=5, lock="L1"), 201)
    # Checked before the fence: even a much higher token under another lock is refused.
    b = expect_error(p.put("owned", b"evil", token=500, lock="L2"), 409, "lock_mismatch", "PUT under another lock")
    eq((b.get("key"), b.get("lock")), ("owned", "L1"), "lock_mismatch body names the key's lock")
    b = expect_error(p.put("owned", b"evil", token=500), 409, "lock_mismatch", "PUT with default lock")
    eq(b.get("lock"), "L1", "lock_mismatch lock")
    expect_error(p.delete("owned", token=500, lock="L2"), 409, "lock_mismatch", "DELETE under another lock")
    g = p.get("owned")
    eq((g.body, g.header("Fencing-Lock"), g.header("Fencing-Token")), (b"v", "L1", "5"), "nothing written")
    assert_no_fence(p, "L2", "lock_mismatch must not advance the other lock's fence")
    assert_no_fence(p, "owned")
    assert_fence(p, "L1", 5)
    # A deleted key is free again and may be recreated under any lock.
    expect_status(p.delete("owned", token=6, lock="L1"), 204)
    r = p.put("owned", b"new", token=1, lock="L2")
    expect_status(r, 201, "recreate under another lock after delete")
    eq(p.get("owned").header("Fencing-Lock"), "L2", "new owner lock")


def test_conditional_writes(store):
    p = start(store)
    key = "cond"
    expect_status(p.put(key, b"v1", token=1, headers={"If-None-Match": "*"}), 201, "If-None-Match * on absent key")
    expect_error(p.put(key, b"v2", token=2, headers={"If-None-Match": "*"}), 412, "precondition_failed",
                 "If-None-Match * on existing key")
    assert_fence(p, key, 1, "412 leaves the fence where it was")
    eq(p.get(key).body, b"v1", "412 wrote nothing")
    expect_error(p.put(key, b"v2", token=3, headers={"If-Match": '"7"'}), 412, "precondition_failed",
                 "If-Match wrong version")
    assert_fence(p, key, 1, "412 (If-Match) leaves the fence where it was")
    r = p.put(key, b"v2", token=3, headers={"If-Match": '"1"'})
    expect_status(r, 200, "If-Match right version")
    eq(r.etag, '"2"', "ETag after conditional write")
    expect_error(p.put("cond-absent", b"x", token=1, headers={"If-Match": '"1"'}), 412, "precondition_failed",
                 "If-Match on absent key")
    assert_absent(p, "cond-absent")
    assert_no_fence(p, "cond-absent")
    # Conditional DELETE.
    expect_error(p.delete(key, token=4, headers={"If-Match": '"1"'}), 412, "precondition_failed",
                 "DELETE If-Match wrong version")
    eq(p.get(key).body, b"v2", "conditional DELETE deleted nothing")
    expect_status(p.delete(key, token=4, headers={"If-Match": '"2"'}), 204, "DELETE If-Match right")
    # After delete, If-None-Match: * creates again.
    expect_status(p.put(key, b"v3", token=5, headers={"If-None-Match": "*"}), 201, "If-None-Match after delete")
    # Stale token with a matching precondition is still stale.
    expect_error(p.put(key, b"z", token=1, headers={"If-Match": p.get(key).etag}), 409, "stale_token",
                 "stale + matching If-Match")


# ---------------------------------------------------------------------------
# Tokens and names (docs/api.md#tokens, #names)
# ---------------------------------------------------------------------------

BAD_TOKENS = ["", "+5", "-1", "0x2A", "1e3", "007", "00", "4 2", "5,6", "9223372036854775808",
              "18446744073709551616", "99999999999999999999", "1.5", "abc", "5a", " ", "\u0661".encode().decode("latin-1"),
              "１".encode().decode("latin-1"), "0 0", "5;6", "\x01", "5\x7f", "5\x00"]
GOOD_TOKENS = [("0", 0), ("42", 42), ("  43  ", 43), ("\t44", 44), ("9223372036854775807", MAX_TOKEN)]


def test_invalid_tokens(store):
    p = start(store)
    for i, t in enumerate(BAD_TOKENS):
        key = "badtok/%d" % i
        for hdr in ("Fencing-Token", "X-Fencing-Token"):
            r = raw_put(p, "/v1/resources/" + key, [(hdr, t)])
            expect_error(r, 400, "invalid_token", "PUT %s: %r" % (hdr, t))
        # A fresh connection each: a server may close after a malformed header value.
        with p.raw() as c:
            r = c.request("DELETE", "/v1/resources/" + key, headers=[("Fencing-Token", t)])
            expect_error(r, 400, "invalid_token", "DELETE Fencing-Token: %r" % t)
        with p.raw() as c:
            r = c.request("PUT", "/v1/fences/" + key, headers=[("Fencing-Token", t)])
            expect_error(r, 400, "invalid_token", "PUT fence Fencing-Token: %r" % t)
        assert_absent(p, key)
        assert_no_fence(p, key)
    # The header twice (same or different values), and both spellings at once.
    for hdrs in ([("Fencing-Token", "5"), ("Fencing-Token", "5")],
                 [("Fencing-Token", "5"), ("Fencing-Token", "6")],
                 [("X-Fencing-Token", "5"), ("X-Fencing-Token", "5")],
                 [("Fencing-Token", "5"), ("X-Fencing-Token", "5")],
                 [("Fencing-Token", "5"), ("X-Fencing-Token", "6")]):
        r = raw_put(p, "/v1/resources/twice", hdrs)
        expect_error(r, 400, "invalid_token", "PUT with %r" % hdrs)
        with p.raw() as c:
            expect_error(c.request("PUT", "/v1/fences/twice", headers=hdrs), 400, "invalid_token",
                         "PUT fence with %r" % hdrs)
    assert_absent(p, "twice")
    assert_no_fence(p, "twice")


def test_valid_tokens(store):
    p = start(store)
    for i, (t, v) in enumerate(GOOD_TOKENS):
        for hdr in ("Fencing-Token", "X-Fencing-Token"):
            key = "goodtok/%d/%s" % (i, hdr)
            r = raw_put(p, "/v1/resources/" + key, [(hdr, t)])
            expect_status(r, 201, "PUT %s: %r" % (hdr, t))
            eq(r.json().get("token"), v, "token echoed as a JSON integer for %r" % t)
            assert_fence(p, key, v)
    # The maximum token, then one below it is stale.
    expect_status(p.put("max", b"m", token=MAX_TOKEN), 201)
    b = expect_error(p.put("max", b"z", token=MAX_TOKEN - 1), 409, "stale_token", "max-1 after max")
    eq(b.get("current_token"), MAX_TOKEN, "current_token as a 64-bit integer")


# Invalid for keys and lock names alike.
BAD_NAME_PATHS = [
    "%zz", "a%2", "a%", "%", "%g0", "a%zz%2fb",
    "a%00b", "%01", "a%1fb", "%7f", "a%0ab", "a%0d%0ab",
    "%ff", "%c3%28", "%ed%a0%80", "%c0%af",           # invalid UTF-8 / overlong / surrogate
    "k" * 1025, "%6b" * 1025,                        # overlong after decoding
]
# Invalid for keys (segment rules); decoded %2f is a '/' too.
BAD_KEY_PATHS = BAD_NAME_PATHS + [
    "a/%zz/b",
    "..", ".", "a/..", "a/../b", "../etc/passwd", "a/./b", "./a",
    "%2e%2e", "%2E%2E/x", "a/%2e%2e/%2e%2e/b", "a%2f..%2fb", "%2e",
    "a//b", "/a", "a/", "a%2f%2fb", "a%2F",
]


def test_invalid_names(store):
    p = start(store)
    for path in BAD_KEY_PATHS:
        url = "/v1/resources/" + path
        for method in ("PUT", "GET", "DELETE", "HEAD"):
            with p.raw() as c:
                r = c.request(method, url, headers=[("Fencing-Token", "5")] if method in ("PUT", "DELETE") else [],
                              body=b"x" if method == "PUT" else None)
            what = "%s %s" % (method, url[:80])
            if method == "HEAD":
                eq(r.status, 400, what)
            else:
                expect_error(r, 400, "invalid_name", what)
    for path in BAD_NAME_PATHS:
        with p.raw() as c:
            r = c.request("PUT", "/v1/fences/" + path, headers=[("Fencing-Token", "5")])
            expect_error(r, 400, "invalid_name", "PUT fence %s" % path[:80])
            r = c.request("GET", "/v1/fences/" + path)
            expect_error(r, 400, "invalid_name", "GET fence %s" % path[:80])
    # Empty key.
    with p.raw() as c:
        expect_error(c.request("PUT", "/v1/resources/", headers=[("Fencing-Token", "5")], body=b"x"),
                     400, "invalid_name", "PUT empty key")
    # Fencing-Lock: taken literally, same rules.
    for lock in ["", "a\tb", "a\x01b", "a\x7fb", "\x00", "a\x1fb", "L" * 1025, "\xff\xfe", "\xc0\xaf"]:
        r = raw_put(p, "/v1/resources/lockcheck", [("Fencing-Token", "5"), ("Fencing-Lock", lock)])
        expect_error(r, 400, "invalid_name", "Fencing-Lock %r" % lock[:40])
    # Literal: "%zz" in Fencing-Lock is a valid name, not an escape.
    r = raw_put(p, "/v1/resources/lockcheck", [("Fencing-Token", "5"), ("Fencing-Lock", "a%zz")])
    expect_status(r, 201, "Fencing-Lock a%zz is literal")
    eq(r.json().get("lock"), "a%zz", "lock taken literally")
    with p.client() as c:
        r = c.request("GET", "/v1/fences/a%25zz")
        eq((r.status, r.json().get("lock")), (200, "a%zz"), "fence of literal lock via escaped path")
    # Nothing was written by any rejected request: the only fence is a%zz.
    r = p.list_fences()
    expect_status(r, 200)
    eq([f["lock"] for f in r.json()["fences"]], ["a%zz"], "fences after invalid names")
    if store.kind == "file":
        # No name reached outside the store root.
        parent = os.path.dirname(store.root)
        leaked = [n for n in os.listdir(parent) if not n.startswith(("store-", "proxy-", "cfg-", "run-"))]
        eq(leaked, [], "entries created next to the store root")


# ---------------------------------------------------------------------------
# Routes and statuses
# ---------------------------------------------------------------------------

def test_not_found_routes(store):
    p = start(store)
    for method, path in [("GET", "/"), ("GET", "/nope"), ("GET", "/v1"), ("GET", "/v1/nope/x"),
                         ("GET", "/v2/resources/x"), ("PUT", "/v1/other/x"), ("GET", "/healthzz")]:
        r = p.request(method, path, headers={"Fencing-Token": "1"} if method == "PUT" else None,
                      body=b"x" if method == "PUT" else None)
        expect_error(r, 404, "not_found", "%s %s" % (method, path))
    expect_error(p.get("no/such/key"), 404, "not_found", "missing key")
    expect_error(p.fence("no-such-lock"), 404, "not_found", "missing fence")
    if store.kind == "file":
        r = p.operation("x", 5, "oplock", [1])
        expect_error(r, 404, "not_found", "POST /v1/operations/x on the file store")
        assert_no_fence(p, "oplock", "operation on file store wrote a fence")


def allow_set(r):
    a = r.header("Allow")
    check(a is not None, "405 without Allow header")
    return {m.strip().upper() for m in a.split(",") if m.strip()}


def test_method_not_allowed(store):
    p = start(store)
    cases = [
        ("/v1/resources/k", ["POST", "PATCH", "OPTIONS"], {"GET", "HEAD", "PUT", "DELETE"}),
        ("/v1/fences/L", ["POST", "DELETE", "PATCH"], {"GET", "HEAD", "PUT"}),
        ("/v1/fences", ["POST", "PUT", "DELETE"], {"GET", "HEAD"}),
        ("/healthz", ["POST", "PUT", "DELETE"], {"GET", "HEAD"}),
        ("/readyz", ["POST"], {"GET", "HEAD"}),
    ]
    for path, methods, allowed in cases:
        for m in methods:
            r = p.request(m, path, headers={"Fencing-Token": "1"}, body=b"x" if m in ("POST", "PUT", "PATCH") else None)
            expect_error(r, 405, "method_not_allowed", "%s %s" % (m, path))
            got = allow_set(r)
            check(allowed <= got and m not in got, "%s %s: Allow %r, want %r" % (m, path, got, allowed))
    assert_absent(p, "k")
    assert_no_fence(p, "L")


def test_missing_token(store):
    p = start(store)
    expect_error(p.put("nt", b"x"), 428, "missing_token", "PUT without token")
    expect_error(p.delete("nt"), 428, "missing_token", "DELETE without token")
    expect_error(p.request("PUT", "/v1/fences/nt"), 428, "missing_token", "PUT fence without token")
    assert_absent(p, "nt")
    assert_no_fence(p, "nt")
    expect_status(p.put("nt", b"x", token=1), 201)
    expect_error(p.put("nt", b"y"), 428, "missing_token", "PUT without token on existing key")
    eq(p.get("nt").body, b"x", "unchanged")


def test_body_too_large(store):
    p = start(store, config={"limits": {"max_body_bytes": 1024}})
    expect_status(p.put("big/ok", b"x" * 1024, token=1), 201, "body at the limit")
    expect_error(p.put("big/no", b"x" * 1025, token=1), 413, "body_too_large", "body above the limit")
    assert_absent(p, "big/no")
    assert_no_fence(p, "big/no")
    # Declared length above the limit: answered without waiting for the body.
    with p.raw(timeout=5) as c:
        c.send_raw(fk.build_request("PUT", "/v1/resources/big/declared",
                                    [("Fencing-Token", "1"), ("Content-Length", "100000")]))
        expect_error(c.read_response(timeout=5, method="PUT"), 413, "body_too_large", "declared Content-Length")
    # Chunked body above the limit.
    with p.raw(timeout=5) as c:
        chunk = b"x" * 600
        body = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk, len(chunk), chunk)
        r = c.request("PUT", "/v1/resources/big/chunked",
                      headers=[("Fencing-Token", "1"), ("Transfer-Encoding", "chunked")], body=body)
        expect_error(r, 413, "body_too_large", "chunked body above the limit")
    assert_absent(p, "big/declared")
    assert_absent(p, "big/chunked")
    eq(p.get("big/ok").body, b"x" * 1024, "body at the limit stored")


def test_headers_too_large(store):
    p = start(store)
    with p.raw() as c:
        r = c.request("GET", "/healthz", headers=[("X-Big", "a" * (20 * 1024))])
        expect_error(r, 431, "headers_too_large", "20 KiB header")
    with p.raw() as c:
        r = c.request("PUT", "/v1/resources/" + "k" * (20 * 1024), headers=[("Fencing-Token", "1")], body=b"x")
        expect_error(r, 431, "headers_too_large", "20 KiB request line")
    with p.raw() as c:
        hdrs = [("X-H%d" % i, "v" * 100) for i in range(200)] + [("Fencing-Token", "1")]
        r = c.request("PUT", "/v1/resources/many-headers", headers=hdrs, body=b"x")
        expect_error(r, 431, "headers_too_large", "many headers totalling 20 KiB")
    assert_absent(p, "many-headers")
    # Just under the limit is fine.
    with p.raw() as c:
        expect_status(c.request("GET", "/healthz", headers=[("X-Big", "a" * (12 * 1024))]), 200, "12 KiB header")


def test_health_and_ready(store):
    p = start(store)
    r = p.request("GET", "/healthz")
    expect_status(r, 200, "/healthz")
    eq(r.json(), {"status": "ok"}, "/healthz body")
    expect_status(p.request("GET", "/readyz"), 200, "/readyz")
    h = p.request("HEAD", "/healthz")
    eq((h.status, h.body), (200, b""), "HEAD /healthz")


def test_metrics(store):
    p = start(store)
    expect_status(p.put("m", b"x", token=5), 201)
    expect_error(p.put("m", b"x", token=4), 409, "stale_token")
    r = p.request("GET", "/metrics")
    expect_status(r, 200, "/metrics")
    check((r.header("Content-Type") or "").startswith("text/plain"), "metrics Content-Type %r" % r.header("Content-Type"))
    text = r.text
    for name in ["fencekeeper_requests_total", "fencekeeper_writes_total", "fencekeeper_stale_token_gap",
                 "fencekeeper_request_duration_seconds", "fencekeeper_store_duration_seconds",
                 "fencekeeper_inflight_requests", "fencekeeper_open_connections", "fencekeeper_store_errors_total"]:
        check(name in text, "metric %s missing" % name)
    m = re.search(r'^fencekeeper_writes_total\{[^}]*result="stale"[^}]*\}\s+(\d+(\.\d+)?)', text, re.M)
    check(m and float(m.group(1)) >= 1, "writes_total{result=stale} not counted")
    check("stale/" not in text and 'key="' not in text and 'lock="' not in text, "per-key/lock labels in metrics")


def test_request_id(store):
    p = start(store)
    r = p.request("GET", "/healthz", headers={"X-Request-Id": "abc-123"})
    eq(r.header("X-Request-Id"), "abc-123", "echoed X-Request-Id")
    ids = set()
    for method, path in [("GET", "/healthz"), ("GET", "/nope"), ("GET", "/v1/resources/%zz"),
                         ("PUT", "/v1/resources/rid")]:
        r = p.request(method, path)
        rid = r.header("X-Request-Id")
        check(rid, "%s %s (%d) without X-Request-Id" % (method, path, r.status))
        ids.add(rid)
    eq(len(ids), 4, "generated request ids are unique")
    r = p.put("rid", b"x", token=1, headers={"X-Request-Id": "put-1"})
    eq((r.status, r.header("X-Request-Id")), (201, "put-1"), "X-Request-Id on a write")
    r = p.put("rid", b"x", token=0, headers={"X-Request-Id": "stale-1"})
    eq((r.status, r.header("X-Request-Id")), (409, "stale-1"), "X-Request-Id on a 409")


def test_fence_api(store):
    p = start(store)
    expect_error(p.fence("fresh"), 404, "not_found", "never fenced")
    r = p.put_fence("fresh", 7)
    expect_status(r, 200, "PUT fence")
    eq(r.json(), {"lock": "fresh", "token": 7}, "PUT fence body")
    assert_fence(p, "fresh", 7)
    expect_status(p.put_fence("fresh", 7), 200, "PUT fence same token")
    b = expect_error(p.put_fence("fresh", 6), 409, "stale_token", "PUT fence lower")
    eq((b.get("lock"), b.get("token"), b.get("current_token")), ("fresh", 6, 7), "409 body")
    assert_fence(p, "fresh", 7)
    # The fence shuts out data writes of older holders.
    expect_error(p.put("fresh", b"old", token=6), 409, "stale_token", "write below advanced fence")
    assert_absent(p, "fresh")
    expect_status(p.put("fresh", b"new", token=7), 201)
    expect_status(p.put_fence("fresh", 9), 200)
    expect_error(p.put("fresh", b"old", token=8), 409, "stale_token")
    eq(p.get("fresh").body, b"new", "data unchanged")
    h = p.request("HEAD", "/v1/fences/fresh")
    eq((h.status, h.body), (200, b""), "HEAD fence")


def test_fence_listing(store):
    p = start(store)
    locks = ["p/a", "p/B", "p/c", "p/é", "p/d", "p/e"]
    for i, l in enumerate(locks):
        expect_status(p.put_fence(l, i + 1), 200)
    expect_status(p.put_fence("q/outside", 1), 200)
    expect_status(p.put_fence("p", 1), 200)
    want = sorted(locks, key=lambda s: s.encode())   # bytewise
    r = p.list_fences(prefix="p/")
    expect_status(r, 200, "listing")
    b = r.json()
    eq([f["lock"] for f in b["fences"]], want, "listing sorted bytewise, prefix filtered")
    check("next" in b and b["next"] is None, "single page listing has next null: %r" % b.get("next"))
    for f in b["fences"]:
        eq(f["token"], locks.index(f["lock"]) + 1, "token of %s" % f["lock"])
        check(RFC3339_UTC.match(f["updated_at"] or ""), "updated_at %r" % f.get("updated_at"))
    # Pagination.
    got, after, pages = [], None, 0
    while True:
        r = p.list_fences(prefix="p/", limit=2, after=after)
        expect_status(r, 200, "page %d" % pages)
        b = r.json()
        check(len(b["fences"]) <= 2, "page larger than limit")
        got += [f["lock"] for f in b["fences"]]
        pages += 1
        check(pages < 10, "pagination does not end")
        if b["next"] is None:
            break
        eq(b["next"], b["fences"][-1]["lock"], "next is the last lock of the page")
        after = b["next"]
    eq(got, want, "all pages")
    eq(pages, 3, "6 locks / limit 2 = 3 pages")
    # All locks without prefix.
    r = p.list_fences()
    eq([f["lock"] for f in r.json()["fences"]], sorted(locks + ["q/outside", "p"], key=lambda s: s.encode()),
       "listing without prefix")
    # Bad parameters.
    for q in ["limit=abc", "limit=-1", "limit=1001", "limit=99999999999999999999"]:
        r = p.request("GET", "/v1/fences?" + q)
        expect_error(r, 400, "invalid_request", "GET /v1/fences?" + q)
    r = p.list_fences(limit=1000)
    expect_status(r, 200, "limit=1000")


# ---------------------------------------------------------------------------
# Fence floors (docs/api.md#fence-floors)
# ---------------------------------------------------------------------------

def floor_path(prefix):
    return "/v1/floors?prefix=" + urllib.parse.quote(prefix, safe="")


def put_floor(c, prefix, token, headers=None):
    """PUT /v1/floors?prefix=PREFIX through `c` (a Proxy or a Client)."""
    h = {"Fencing-Token": str(token)}
    h.update(headers or {})
    return c.request("PUT", floor_path(prefix), headers=h)


def floors_of(c):
    r = c.request("GET", "/v1/floors")
    expect_status(r, 200, "GET /v1/floors")
    b = r.json()
    eq(sorted(b), ["floors"], "GET /v1/floors members")
    for f in b["floors"]:
        eq(sorted(f), ["prefix", "token", "updated_at"], "floor members")
        check(RFC3339_UTC.match(f["updated_at"] or ""), "floor updated_at %r" % f.get("updated_at"))
    return {f["prefix"]: f["token"] for f in b["floors"]}, [f["prefix"] for f in b["floors"]]


def expect_floor_stale(r, lock, token, current, floor, what, cached=False):
    """A 409 stale_token of a write below the effective fence; `floor` is the prefix the
    body must name, or None when the lock's own fence refused it. `cached`: the Postgres
    store may answer from its fence cache, which keeps the effective fence but not the
    floor's name (docs/api.md#fence-floors), so there the floor may be absent."""
    b = expect_error(r, 409, "stale_token", what)
    eq((b.get("lock"), b.get("token"), b.get("current_token")), (lock, token, current), what + ": 409 body")
    if cached and floor is not None and "floor" not in b:
        return b
    eq(b.get("floor"), floor, what + ": floor named in the 409")
    return b


def stale_floor_count(p):
    r = p.request("GET", "/metrics")
    expect_status(r, 200, "/metrics")
    m = re.search(r"^fencekeeper_stale_floor_total (\d+)$", r.text, re.M)
    check(m, "fencekeeper_stale_floor_total missing from /metrics")
    return int(m.group(1))


def test_floor_api(store):
    p = start(store)
    eq(floors_of(p), ({}, []), "no floors at first")
    r = put_floor(p, "jobs/", 100)
    expect_status(r, 200, "PUT floor")
    eq(r.json(), {"prefix": "jobs/", "token": 100}, "PUT floor body")
    eq((r.header("Content-Type") or "").split(";")[0], "application/json", "PUT floor Content-Type")
    expect_status(put_floor(p, "", 7), 200, "floor of every lock (prefix=)")
    expect_status(put_floor(p, "B", 3), 200)
    expect_status(put_floor(p, "é/x y+z", 4), 200, "a prefix with UTF-8, space and +")
    floors, order = floors_of(p)
    eq(floors, {"": 7, "B": 3, "jobs/": 100, "é/x y+z": 4}, "GET /v1/floors")
    eq(order, sorted(order, key=lambda s: s.encode()), "floors sorted bytewise by prefix")
    h = p.request("HEAD", "/v1/floors")
    eq((h.status, h.body), (200, b""), "HEAD /v1/floors")

    # Floors only go up: equal and lower are 409 with the prefix's floor.
    for t in (100, 99, 0):
        b = expect_error(put_floor(p, "jobs/", t), 409, "stale_token", "floor %d over 100" % t)
        eq((b.get("prefix"), b.get("token"), b.get("current_token")), ("jobs/", t, 100), "409 body of a floor")
        check("lock" not in b, "a floor's 409 has no lock: %r" % b)
    expect_status(put_floor(p, "jobs/", 101), 200, "higher floor")
    eq(floors_of(p)[0]["jobs/"], 101, "floor raised")

    # The request: a prefix is required; token rules as for any write; other methods 405.
    b = expect_error(p.request("PUT", "/v1/floors", headers={"Fencing-Token": "5"}), 400, "invalid_request",
                     "PUT /v1/floors without prefix")
    check("prefix=" in b["message"], "the 400 says to pass prefix=: %r" % b["message"])
    for q in ["prefix=%zz", "prefix=a%00", "prefix=a&prefix=b", "prefix=" + "p" * 1025]:
        expect_error(p.request("PUT", "/v1/floors?" + q, headers={"Fencing-Token": "5"}), 400,
                     "invalid_request", "PUT /v1/floors?" + q[:40])
    expect_error(p.request("PUT", floor_path("nt")), 428, "missing_token", "PUT floor without token")
    expect_error(put_floor(p, "nt", "-1"), 400, "invalid_token", "PUT floor with a bad token")
    for m in ("POST", "DELETE", "PATCH"):
        r = p.request(m, floor_path("x"), headers={"Fencing-Token": "1"})
        expect_error(r, 405, "method_not_allowed", "%s /v1/floors" % m)
        eq(allow_set(r), {"GET", "HEAD", "PUT"}, "Allow of /v1/floors")
    check("nt" not in floors_of(p)[0] and "x" not in floors_of(p)[0], "refused requests raised a floor")

    # Idempotency-Key: a retry of an applied raise is its first reply; another request
    # with the key is 422.
    key = {"Idempotency-Key": "floor-" + fk.rand_name()}
    first = put_floor(p, "idem/", 30, headers=key)
    expect_status(first, 200, "keyed floor")
    expect_status(put_floor(p, "idem/", 40), 200)
    again = put_floor(p, "idem/", 30, headers=key)
    expect_status(again, 200, "keyed floor retried")
    eq(again.header("Idempotent-Replayed"), "true", "replayed floor")
    eq(again.body, first.body, "replayed floor body")
    expect_error(put_floor(p, "idem/", 31, headers=key), 422, "idempotency_key_reused", "key on another floor")
    eq(floors_of(p)[0]["idem/"], 40, "the replay changed nothing")


def test_floor_rejects_writes_below_it(store):
    p = start(store)
    # Before the floor: one lock fenced below it, one above it.
    expect_status(p.put("jobs/a", b"before", token=5), 201)
    expect_status(p.put_fence("jobs/high", 90), 200)
    expect_status(p.put("other", b"o", token=1), 201)
    expect_status(put_floor(p, "jobs/", 50), 200)

    # A lock never fenced: every write route below the floor is 409, naming the floor.
    expect_floor_stale(p.put("jobs/new", b"z", token=49), "jobs/new", 49, 50, "jobs/", "PUT, never fenced")
    # (On Postgres, a second rejection on a lock may come from the fence cache.)
    pg = store.kind == "postgres"
    expect_floor_stale(p.delete("jobs/new", token=1), "jobs/new", 1, 50, "jobs/", "DELETE, never fenced", pg)
    expect_floor_stale(p.put_fence("jobs/new", 10), "jobs/new", 10, 50, "jobs/", "PUT fence, never fenced", pg)
    expect_floor_stale(p.put("k", b"z", token=0, lock="jobs/viaheader"), "jobs/viaheader", 0, 50, "jobs/",
                       "PUT under Fencing-Lock, never fenced")
    assert_absent(p, "jobs/new")
    assert_absent(p, "k")
    # A fenced lock whose own fence is below the floor.
    expect_floor_stale(p.put("jobs/a", b"zombie", token=5), "jobs/a", 5, 50, "jobs/", "PUT, own fence 5")
    expect_floor_stale(p.delete("jobs/a", token=49), "jobs/a", 49, 50, "jobs/", "DELETE, own fence 5", pg)
    expect_floor_stale(p.put_fence("jobs/a", 6), "jobs/a", 6, 50, "jobs/", "PUT fence, own fence 5", pg)
    eq(p.get("jobs/a").body, b"before", "nothing written below the floor")
    # A lock whose own fence is above the floor: its fence refuses, the floor is not named.
    expect_floor_stale(p.put("jobs/high", b"z", token=60), "jobs/high", 60, 90, None, "own fence above the floor")

    # GET /v1/fences/{lock}: the effective fence, naming the floor when it sets it.
    for lock in ("jobs/a", "jobs/never"):
        b = assert_fence(p, lock, 50, "effective fence of %s" % lock)
        eq(b.get("floor"), "jobs/", "GET fence %s names the floor" % lock)
    b = assert_fence(p, "jobs/high", 90)
    check("floor" not in b, "own fence above the floor: no floor member: %r" % b)
    expect_error(p.fence("nojobs"), 404, "not_found", "a lock outside the prefix, never fenced")
    # The listing shows own fences only.
    eq([(f["lock"], f["token"]) for f in p.list_fences(prefix="jobs/").json()["fences"]],
       [("jobs/a", 5), ("jobs/high", 90)], "listing under the floor: own fences")

    # At or above the floor, writes apply and set the lock's own fence.
    r = p.put("jobs/a", b"live", token=50)
    expect_status(r, 200, "PUT at the floor")
    eq(r.json()["token"], 50, "token of a write at the floor")
    b = assert_fence(p, "jobs/a", 50, "own fence moved to the floor's token")
    check("floor" not in b, "an own fence equal to the floor is the lock's own: %r" % b)
    expect_status(p.put_fence("jobs/new", 51), 200, "PUT fence above the floor")
    expect_status(p.delete("jobs/gone", token=50), 204, "DELETE at the floor")
    expect_floor_stale(p.put("jobs/new", b"z", token=50), "jobs/new", 50, 51, None, "own fence 51 now")
    # Outside the prefix, nothing changed ("jobs" itself does not start with "jobs/").
    expect_status(p.put("other", b"o2", token=1), 200, "lock outside the prefix")
    expect_status(p.put("jobs", b"j", token=1), 201, "lock 'jobs' is not under 'jobs/'")

    # A floor of every lock, above a longer prefix's floor: the highest floor decides.
    expect_status(put_floor(p, "", 70), 200)
    expect_floor_stale(p.put("other", b"z", token=1), "other", 1, 70, "", "floor of every lock")
    expect_floor_stale(p.put("jobs/a", b"z", token=60), "jobs/a", 60, 70, "", "the higher floor decides")
    b = assert_fence(p, "jobs/never", 70)
    eq(b.get("floor"), "", "GET fence names the empty prefix")


def test_floor_survives_restart_and_kill9(store):
    p = start(store)
    expect_status(p.put("svc/a", b"x", token=3), 201)
    expect_status(put_floor(p, "svc/", 40), 200)
    expect_status(put_floor(p, "", 2), 200)
    before = floors_of(p)
    g = p.request("GET", "/v1/floors").json()
    for how in ("SIGTERM", "kill -9", "kill -9"):
        if how == "SIGTERM":
            eq(p.stop(), 0, "graceful stop")
        else:
            eq(p.kill(), -9, "killed by SIGKILL")
        p.start()
        p.wait_ready()
        eq(floors_of(p), before, "floors after %s" % how)
        eq(p.request("GET", "/v1/floors").json(), g, "floors with updated_at after %s" % how)
        expect_floor_stale(p.put("svc/a", b"zombie", token=39), "svc/a", 39, 40, "svc/", "after " + how)
        expect_floor_stale(p.put_fence("svc/never", 1), "svc/never", 1, 40, "svc/", "after " + how)
        expect_error(put_floor(p, "svc/", 40), 409, "stale_token", "equal floor after " + how)
        eq(assert_fence(p, "svc/never", 40).get("floor"), "svc/", "GET fence after " + how)
    eq(p.get("svc/a").body, b"x", "nothing written below the floor")
    # A floor raised just before a kill -9 survives it (its 200 was durable).
    expect_status(put_floor(p, "svc/", 41), 200)
    p.kill()
    p.start()
    p.wait_ready()
    eq(floors_of(p)[0]["svc/"], 41, "floor raised just before kill -9")


def test_floor_limit(store):
    p = start(store)
    with p.client() as c:
        for i in range(1000):
            r = put_floor(c, "lim/%04d" % i, 1)
            if r.status != 200:
                expect_status(r, 200, "floor %d of 1000" % i)
        b = expect_error(put_floor(c, "lim/one-more", 1), 400, "invalid_request", "the 1001st floor")
        check("1000" in b["message"] or "1,000" in b["message"], "the 400 names the limit: %r" % b["message"])
        expect_status(put_floor(c, "lim/0007", 2), 200, "raising an existing floor at the limit")
        floors, order = floors_of(c)
    eq(len(floors), 1000, "floors kept")
    eq(floors["lim/0007"], 2, "raised floor")
    check("lim/one-more" not in floors, "the refused floor is absent")


def test_floor_metric(store):
    p = start(store)
    n0 = stale_floor_count(p)
    expect_status(p.put_fence("m/own", 100), 200)
    expect_status(put_floor(p, "m/", 10), 200)
    expect_error(p.put("m/a", b"z", token=9), 409, "stale_token")          # the floor: counted
    expect_error(p.put_fence("m/b", 1), 409, "stale_token")                # counted
    expect_error(p.put("m/own", b"z", token=50), 409, "stale_token")       # own fence: not counted
    expect_error(put_floor(p, "m/", 10), 409, "stale_token")               # a floor's own 409: not a write
    eq(stale_floor_count(p) - n0, 2, "fencekeeper_stale_floor_total counts writes a floor refused")
    text = p.request("GET", "/metrics").text
    for series in ('fencekeeper_requests_total{route="floors",code="200"}',
                   'fencekeeper_requests_total{route="floors",code="409"}',
                   'fencekeeper_store_duration_seconds_count{op="floor_raise"}'):
        m = re.search("^" + re.escape(series) + r" (\d+)$", text, re.M)
        check(m and int(m.group(1)) >= 1, "%s missing or 0" % series)


def test_floor_through_another_proxy():
    """Two fencekeepers on one Postgres: a floor raised through A is enforced on a write
    through B, although B's fence cache has seen the lock (its fast stale path must not
    let the write through, nor answer from a cache that predates the floor)."""
    st = fk.pg_store()
    if st is None:
        raise fk.Skip("needs FK_TEST_PG_URL")
    a = start(st)
    b = start(st)
    with b.client() as cb:
        # B learns the lock's fence and the key's lock: both sit in its cache now.
        expect_status(cb.put("two/a", b"one", token=10), 201)
        expect_status(cb.put("two/a", b"two", token=10), 200)
        expect_error(cb.put("two/a", b"z", token=9), 409, "stale_token", "B's cached fence")
        expect_status(cb.put_fence("two/b", 10), 200)
        expect_status(put_floor(a, "two/", 20), 200, "floor through A")
        # Between the own fence (10, cached by B) and the floor (20): refused by B.
        expect_floor_stale(cb.put("two/a", b"zombie", token=15), "two/a", 15, 20, "two/", "B, fenced lock")
        expect_floor_stale(cb.delete("two/a", token=10), "two/a", 10, 20, "two/", "B, DELETE", cached=True)
        expect_floor_stale(cb.put_fence("two/b", 19), "two/b", 19, 20, "two/", "B, PUT fence")
        expect_floor_stale(cb.put("two/c", b"z", token=1), "two/c", 1, 20, "two/", "B, never fenced")
        # Below B's cached fence too: still 409 (whatever fence the reply quotes).
        expect_error(cb.put("two/a", b"z", token=9), 409, "stale_token", "B, below the cached fence")
        eq(cb.get("two/a").body, b"two", "nothing written through B below the floor")
        eq(assert_fence(b, "two/a", 20).get("floor"), "two/", "GET fence through B")
        eq(floors_of(cb)[0], {"two/": 20}, "GET /v1/floors through B")
        # At the floor, B writes.
        expect_status(cb.put("two/a", b"live", token=20), 200, "B at the floor")
        # And the other way round, many times: no write below a floor ever lands.
        for i in range(30):
            floor = 100 + 10 * i
            expect_status(put_floor(cb if i % 2 else a, "two/", floor), 200)
            via = a if i % 2 else cb
            expect_floor_stale(via.put("two/a", b"z", token=floor - 1), "two/a", floor - 1, floor, "two/",
                               "round %d" % i)
            expect_status(via.put("two/a", b"ok%d" % i, token=floor), 200, "round %d at the floor" % i)
    eq(a.get("two/a").body, b"ok29", "the last write at the floor")


# ---------------------------------------------------------------------------
# Durability and concurrency
# ---------------------------------------------------------------------------

def test_restart_after_kill9(store):
    p = start(store)
    expect_status(p.put("dur/a", b"alpha", token=41, lock="dur", content_type="text/a"), 201)
    expect_status(p.put("dur/a", b"alpha2", token=42, lock="dur", content_type="text/a"), 200)
    expect_status(p.put_fence("dur", 50), 200)
    expect_status(p.put("dur/gone", b"x", token=50, lock="dur"), 201)
    expect_status(p.delete("dur/gone", token=50, lock="dur"), 204)
    expect_status(p.put_fence("other", 7), 200)
    before = assert_fence(p, "dur", 50)
    for cycle in range(2):
        rc = p.kill()
        eq(rc, -9, "killed by SIGKILL")
        p.start()
        p.wait_ready()
        g = p.get("dur/a")
        eq((g.status, g.body, g.etag, g.header("Fencing-Token"), g.header("Fencing-Lock")),
           (200, b"alpha2", '"2"', "42", "dur"), "data after kill -9 (cycle %d)" % cycle)
        eq((g.header("Content-Type") or "").split(";")[0], "text/a", "content type after restart")
        assert_absent(p, "dur/gone")
        after = assert_fence(p, "dur", 50, "fence after kill -9")
        eq(after["updated_at"], before["updated_at"], "updated_at survives restart")
        assert_fence(p, "other", 7)
        b = expect_error(p.put("dur/a", b"zombie", token=49, lock="dur"), 409, "stale_token", "stale after restart")
        eq(b.get("current_token"), 50, "current_token after restart")
    r = p.put("dur/a", b"alpha3", token=50, lock="dur")
    expect_status(r, 200)
    eq(r.json()["version"], 3, "version continues after restart")


def test_concurrent_race(store):
    p = start(store)
    key, lock = "race/report", "race"
    tokens = random.sample(range(1, 10**9), 400)
    nthreads = 16
    shares = [tokens[i::nthreads] for i in range(nthreads)]
    hist = fk.History()
    results = []
    rlock = threading.Lock()

    barrier = threading.Barrier(nthreads)

    def worker(i):
        with p.client() as c:
            c.healthz()          # connected before the start line
            barrier.wait()       # everyone races for the key's creation too
            for t in shares[i]:
                body = b"token=%d" % t
                op = hist.invoke("w%d" % i, "put", lock, key, t, body)
                try:
                    r = c.put(key, body, token=t, lock=lock)
                except Exception as e:
                    hist.unknown(op, repr(e))
                    raise
                hist.record_response(op, r)
                with rlock:
                    results.append((t, r.status, r.body))

    fk.parallel(worker, nthreads)
    accepted = [t for t, s, _ in results if s in (200, 201)]
    eq(sorted(s for _, s, _ in results if s not in (200, 201, 409)), [], "only 200/201/409")
    eq(sum(1 for _, s, _ in results if s == 201), 1, "exactly one 201")
    for t, s, body in results:
        if s == 409:
            b = json.loads(body)
            eq(b["error"], "stale_token", "409 code")
            check(b["current_token"] > t, "409 for token %d with current_token %r" % (t, b["current_token"]))
    top = max(tokens)
    check(top in accepted, "the highest token must always be accepted")
    g = p.get(key)
    eq((g.status, g.body, g.header("Fencing-Token")), (200, b"token=%d" % top, str(top)), "final body")
    eq(g.etag, '"%d"' % len(accepted), "version = number of applied writes")
    assert_fence(p, lock, top)
    hist.assert_ok(*fk.read_state(p, [key], [lock]))


def test_concurrent_create(store):
    """Rounds of writers racing to create one fresh key (half under the key's own lock,
    half under a lock shared by all rounds): one 201, the rest 200/409, never a 5xx
    (nothing here is overload or a failure), and the highest token wins."""
    p = start(store)
    nthreads, rounds = 12, 25
    statuses = {}
    for rnd in range(rounds):
        key = "create/%d" % rnd
        lock = "create-shared" if rnd % 2 else key
        base = 1000 * (rnd + 1) if rnd % 2 else 0
        tokens = random.sample(range(base + 1, base + 1000), nthreads)
        barrier = threading.Barrier(nthreads)
        clients = [p.client() for _ in range(nthreads)]
        for c in clients:
            c.healthz()

        def worker(i):
            barrier.wait()
            r = clients[i].put(key, b"%d" % tokens[i], token=tokens[i], lock=lock)
            return tokens[i], r.status, r.body

        results = fk.parallel(worker, nthreads)
        for c in clients:
            c.close()
        for t, s, body in results:
            statuses[s] = statuses.get(s, 0) + 1
            check(s in (200, 201, 409), "round %d token %d: status %d %r" % (rnd, t, s, body[:200]))
        eq(sum(1 for _, s, _ in results if s == 201), 1, "round %d: exactly one 201" % rnd)
        top = max(tokens)
        g = p.get(key)
        eq((g.status, g.body), (200, b"%d" % top), "round %d: highest token's body" % rnd)
        eq(g.etag, '"%d"' % sum(1 for _, s, _ in results if s in (200, 201)), "round %d: version" % rnd)


def test_concurrent_many_locks(store):
    """Writers on many locks in parallel: every lock ends at its own highest token."""
    p = start(store)
    nlocks, per = 8, 30
    plan = {"ml/%d" % i: random.sample(range(1, 10**6), per) for i in range(nlocks)}
    hist = fk.History()
    items = [(l, t) for l, ts in plan.items() for t in ts]
    random.shuffle(items)
    nthreads = 12

    def worker(i):
        with p.client() as c:
            for l, t in items[i::nthreads]:
                body = b"%s=%d" % (l.encode(), t)
                op = hist.invoke("w%d" % i, "put", l, l, t, body)
                hist.record_response(op, c.put(l, body, token=t))

    fk.parallel(worker, nthreads)
    for l, ts in plan.items():
        g = p.get(l)
        eq(g.body, b"%s=%d" % (l.encode(), max(ts)), "final body of %s" % l)
        assert_fence(p, l, max(ts))
    hist.assert_ok(*fk.read_state(p, list(plan), list(plan)))


# ---------------------------------------------------------------------------
# HTTP/1.1 behaviour: keep-alive, pipelining, framing, timeouts, garbage
# ---------------------------------------------------------------------------

def test_keep_alive(store):
    p = start(store)
    with p.raw() as c:
        for i in range(50):
            r = c.request("PUT", "/v1/resources/ka", headers=[("Fencing-Token", str(i))], body=b"%d" % i)
            expect_status(r, 201 if i == 0 else 200, "request %d on one connection" % i)
        r = c.request("GET", "/v1/resources/ka")
        eq(r.body, b"49", "last write on keep-alive connection")
        check(not c.is_closed(0.2), "connection closed while keep-alive expected")


def test_pipelining(store):
    p = start(store)
    reqs = [
        ("PUT", "/v1/resources/pipe", [("Fencing-Token", "5"), ("X-Request-Id", "r0")], b"five"),
        ("GET", "/v1/resources/pipe", [("X-Request-Id", "r1")], None),
        ("PUT", "/v1/resources/pipe", [("Fencing-Token", "4"), ("X-Request-Id", "r2")], b"four"),
        ("HEAD", "/v1/resources/pipe", [("X-Request-Id", "r3")], None),
        ("GET", "/nope", [("X-Request-Id", "r4")], None),
        ("PUT", "/v1/resources/pipe", [("Fencing-Token", "6"), ("X-Request-Id", "r5")], b"six"),
        ("GET", "/healthz", [("X-Request-Id", "r6")], None),
        ("DELETE", "/v1/resources/pipe", [("Fencing-Token", "7"), ("X-Request-Id", "r7")], None),
        ("GET", "/v1/resources/pipe", [("X-Request-Id", "r8")], None),
        ("GET", "/v1/fences/pipe", [("X-Request-Id", "r9")], None),
    ]
    want = [201, 200, 409, 200, 404, 200, 200, 204, 404, 200]
    with p.raw() as c:
        data = b"".join(fk.build_request(m, path, h, b) for m, path, h, b in reqs)
        c.methods = [m for m, _, _, _ in reqs]
        c.send_raw(data)   # all requests in one write
        rs = c.read_responses(len(reqs))
    eq([r.status for r in rs], want, "pipelined statuses in order")
    eq([r.header("X-Request-Id") for r in rs], ["r%d" % i for i in range(len(reqs))], "responses in request order")
    eq(rs[1].body, b"five", "GET in pipeline")
    eq(rs[9].json()["token"], 7, "fence after pipeline")
    # Many small pipelined GETs.
    with p.raw() as c:
        n = 100
        c.methods = ["GET"] * n
        c.send_raw(b"".join(fk.build_request("GET", "/healthz", [("X-Request-Id", "g%d" % i)]) for i in range(n)))
        rs = c.read_responses(n)
        eq([r.header("X-Request-Id") for r in rs], ["g%d" % i for i in range(n)], "100 pipelined in order")


SMUGGLED = (b"PUT /v1/resources/smuggled HTTP/1.1\r\nHost: x\r\nFencing-Token: 999\r\n"
            b"Content-Length: 3\r\n\r\nbad")


def smuggling_cases():
    inner = SMUGGLED
    chunk_body = b"0\r\n\r\n" + inner
    return [
        ("CL+TE", [("Content-Length", str(len(chunk_body))), ("Transfer-Encoding", "chunked")], chunk_body, True),
        ("TE+CL", [("Transfer-Encoding", "chunked"), ("Content-Length", "4")], b"5\r\nhello\r\n0\r\n\r\n" + inner, True),
        ("TE gzip", [("Transfer-Encoding", "gzip"), ("Content-Length", "3")], b"abc" + inner, True),
        ("TE gzip, chunked", [("Transfer-Encoding", "gzip, chunked")], b"3\r\nabc\r\n0\r\n\r\n" + inner, True),
        ("TE chunked, gzip", [("Transfer-Encoding", "chunked, gzip")], b"3\r\nabc\r\n0\r\n\r\n" + inner, True),
        ("TE identity", [("Transfer-Encoding", "identity"), ("Content-Length", "3")], b"abc" + inner, True),
        ("TE x-chunked", [("Transfer-Encoding", "xchunked")], b"3\r\nabc\r\n0\r\n\r\n" + inner, True),
        ("TE twice", [("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")],
         b"3\r\nabc\r\n0\r\n\r\n" + inner, False),
        ("TE gzip + TE chunked", [("Transfer-Encoding", "gzip"), ("Transfer-Encoding", "chunked")],
         b"3\r\nabc\r\n0\r\n\r\n" + inner, True),
        ("duplicate CL same", [("Content-Length", "3"), ("Content-Length", "3")], b"abc" + inner, True),
        ("duplicate CL differ", [("Content-Length", "3"), ("Content-Length", str(3 + len(inner)))],
         b"abc" + inner, True),
        ("CL list", [("Content-Length", "3, 3")], b"abc" + inner, False),
        ("CL +3", [("Content-Length", "+3")], b"abc" + inner, False),
        ("CL -1", [("Content-Length", "-1")], b"abc" + inner, False),
        ("CL hex", [("Content-Length", "0x3")], b"abc" + inner, False),
        ("space before colon TE", [("Transfer-Encoding ", "chunked"), ("Content-Length", "3")], b"abc" + inner, False),
        ("bad chunk size", [("Transfer-Encoding", "chunked")], b"zz\r\nabc\r\n0\r\n\r\n" + inner, False),
        ("chunk size overflow", [("Transfer-Encoding", "chunked")],
         b"ffffffffffffffffff1\r\nabc\r\n0\r\n\r\n" + inner, False),
    ]


def test_request_smuggling(store):
    p = start(store)
    for name, hdrs, body, strict_code in smuggling_cases():
        key = "smug/" + re.sub(r"[^a-z0-9]+", "-", name.lower())
        with p.raw(timeout=5) as c:
            c.send_raw(fk.build_request("PUT", "/v1/resources/" + key, [("Fencing-Token", "1")] + hdrs, body))
            try:
                r = c.read_response(timeout=5, method="PUT")
            except fk.ConnectionClosed:
                fk.fail("%s: connection closed without a 400 response" % name)
            if strict_code:
                expect_error(r, 400, "invalid_request", name)
            else:
                eq(r.status, 400, "%s: status" % name)
            # After a framing error the connection is closed; nothing else is answered.
            check(c.is_closed(3.0), "%s: connection not closed after framing error" % name)
            check(b"HTTP/1.1" not in c.buf, "%s: a second (smuggled) response was sent: %r" % (name, c.buf[:200]))
        assert_absent(p, key, "%s: nothing written" % name)
        assert_no_fence(p, key, "%s: no fence" % name)
        assert_absent(p, "smuggled", "%s: smuggled request executed" % name)
        assert_no_fence(p, "smuggled", "%s: smuggled request advanced a fence" % name)
    expect_status(p.request("GET", "/healthz"), 200)


def test_slow_header_client(store):
    p = start(store, config={"limits": {"header_timeout_ms": 1500, "idle_timeout_ms": 3000}})
    closed_at = {}
    stop = threading.Event()

    def slow(i):
        t0 = time.monotonic()
        s = socket.create_connection((p.host, p.port))
        msg = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100 + b"\r\n\r\n"
        try:
            for ch in msg:
                if stop.is_set():
                    break
                s.sendall(bytes([ch]))
                # Did the server give up on us?
                s.settimeout(1.0)
                try:
                    data = s.recv(4096)
                    if not data:
                        closed_at[i] = time.monotonic() - t0
                        return
                    # A 408 (or similar) answer is fine; wait for the close.
                    s.settimeout(2.0)
                    while s.recv(4096):
                        pass
                    closed_at[i] = time.monotonic() - t0
                    return
                except socket.timeout:
                    pass
        except (ConnectionResetError, BrokenPipeError):
            closed_at[i] = time.monotonic() - t0
        finally:
            s.close()

    slow_threads = [threading.Thread(target=slow, args=(i,), daemon=True) for i in range(20)]
    for t in slow_threads:
        t.start()
    # Also: connections that never send anything.
    idle = [socket.create_connection((p.host, p.port)) for _ in range(20)]
    time.sleep(0.3)
    # Meanwhile other clients are served promptly.
    with p.client(timeout=5) as c:
        for i in range(30):
            t0 = time.monotonic()
            expect_status(c.put("slow/other", b"%d" % i, token=i), 201 if i == 0 else 200)
            dt = time.monotonic() - t0
            check(dt < 1.0, "request %d took %.2fs while slow clients were connected" % (i, dt))
    for t in slow_threads:
        t.join(10)
    stop.set()
    eq(sorted(closed_at), list(range(20)), "slow clients disconnected (took %r)" % closed_at)
    for i, dt in closed_at.items():
        check(dt < 5.0, "slow client %d dropped only after %.1fs (header timeout 1.5s)" % (i, dt))
    for s in idle:
        s.settimeout(4.0)
        try:
            data = s.recv(4096)
            while data:
                data = s.recv(4096)
        except socket.timeout:
            fk.fail("a silent connection was not closed after the header timeout")
        except ConnectionResetError:
            pass
        s.close()
    expect_status(p.request("GET", "/healthz"), 200)


def test_idle_keepalive_timeout(store):
    p = start(store, config={"limits": {"idle_timeout_ms": 1000}})
    with p.raw() as c:
        expect_status(c.request("GET", "/healthz"), 200)
        t0 = time.monotonic()
        check(c.is_closed(5.0), "idle keep-alive connection not closed")
        check(time.monotonic() - t0 < 4.0, "idle connection closed too late")



def test_expect_continue_refused_from_the_head(store):
    """docs/api.md#http: a request that its head alone refuses (token, names, route,
    method, the route's own headers) gets its final answer instead of `100 Continue`, so
    its body is never uploaded, and the connection closes (the body was not read).
    An acceptable head gets 100, then its answer."""
    p = start(store)
    ops_refusal = (404, "not_found") if store.kind == "file" else (400, "invalid_request")
    cases = [
        ("PUT", "/v1/resources/e", [], (428, "missing_token")),
        ("PUT", "/v1/resources/e", [("Fencing-Token", "-1")], (400, "invalid_token")),
        ("PUT", "/v1/resources/e", [("Fencing-Token", "1"), ("Fencing-Lock", "")],
         (400, "invalid_name")),
        ("PUT", "/v1/resources/e", [("Fencing-Token", "1"), ("If-None-Match", '"3"')],
         (400, "invalid_request")),
        ("PUT", "/v1/resources/e", [("Fencing-Token", "1"), ("Idempotency-Key", "a b")],
         (400, "invalid_request")),
        ("DELETE", "/v1/resources/e", [], (428, "missing_token")),
        ("PUT", "/v1/resources/a//b", [("Fencing-Token", "1")], (400, "invalid_name")),
        ("PUT", "/v1/nope", [("Fencing-Token", "1")], (404, "not_found")),
        ("POST", "/v1/resources/e", [("Fencing-Token", "1")], (405, "method_not_allowed")),
        ("PUT", "/v1/fences/e", [], (428, "missing_token")),
        ("PUT", "/v1/floors?prefix=e", [("Fencing-Token", "x")], (400, "invalid_token")),
        ("POST", "/v1/operations/credit", [("Fencing-Token", "1")], ops_refusal),
        ("POST", "/v1/transactions", [("Fencing-Token", "01")], (400, "invalid_token")),
    ]
    for method, target, headers, (status, code) in cases:
        what = "%s %s %r with Expect: 100-continue" % (method, target, headers)
        with p.raw() as c:
            head = "%s %s HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n" % (
                method, target)
            head += "".join("%s: %s\r\n" % kv for kv in headers) + "\r\n"
            c.send_raw(head.encode())
            r = c.read_response(timeout=5, method=method)
            eq((r.status, r.json().get("error")), (status, code), what)
            eq((r.header("Connection") or "").lower(), "close", what + ": Connection")
            check(c.is_closed(5.0), what + ": the connection stays open")
    assert_absent(p, "e")
    assert_no_fence(p, "e")
    # Accepted: 100, then the body, then 201.
    with p.raw() as c:
        c.send_raw(b"PUT /v1/resources/e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                   b"Fencing-Token: 1\r\nContent-Length: 4\r\n\r\n")
        eq(c.read_response(timeout=5, method="PUT").status, 100, "an acceptable head")
        c.send_raw(b"body")
        eq(c.read_response(timeout=5, method="PUT").status, 201, "after the body")
    eq(p.get("e").body, b"body", "the body after 100")

def garbage_requests(rng):
    out = [
        b"\x00" * 100,
        b"\r\n\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost x\r\n\r\n",
        b"GET /\x00 HTTP/1.1\r\n\r\n",
        b"G\x7fT / HTTP/1.1\r\n\r\n",
        b" / HTTP/1.1\r\n\r\n",
        b"PUT /v1/resources/g HTTP/1.1\r\nFencing-Token: 1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"PUT /v1/resources/g HTTP/1.1\r\nFencing-Token: 1\r\nContent-Length: 10\r\n\r\nabc",   # then close
        b"PUT /v1/resources/g HTTP/1.1\r\nFencing-Token: 1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"GET /v1/resources/" + b"%" * 5000 + b" HTTP/1.1\r\n\r\n",
        b"GET /v1/fences?prefix=%ff%fe&limit=2&after=%00 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v1/fences?limit=1&limit=2&&&=&x HTTP/1.1\r\nHost: x\r\n\r\n",
        b"HEAD /v1/resources/a HTTP/1.0\r\n\r\n",
        b"GET http://evil/v1/resources/a HTTP/1.1\r\nHost: x\r\n\r\n",
        b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n",
        b"GET * HTTP/1.1\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(rng.randrange(256) for _ in range(200)),
        b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 5000 + b"\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
        b"PUT /v1/resources/g HTTP/1.1\r\nFencing-Token: 1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        b"POST /v1/operations/x HTTP/1.1\r\nFencing-Token: 1\r\nContent-Length: 5\r\n\r\n{{{{{",
    ]
    for _ in range(150):
        kind = rng.randrange(4)
        if kind == 0:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600))))
        elif kind == 1:
            chars = b"GETPUDLHA /v1resoucfnz%:\r\n0123456789-+\x00\xff"
            out.append(bytes(rng.choice(chars) for _ in range(rng.randrange(1, 300))))
        elif kind == 2:
            base = bytearray(fk.build_request("PUT", "/v1/resources/g%d" % rng.randrange(5),
                                              [("Fencing-Token", str(rng.randrange(100)))], b"body"))
            for _ in range(rng.randrange(1, 6)):
                base[rng.randrange(len(base))] = rng.randrange(256)
            out.append(bytes(base))
        else:
            base = bytearray(fk.build_request("PUT", "/v1/resources/g", [("Fencing-Token", "1"),
                                                                         ("Transfer-Encoding", "chunked")],
                                              b"4\r\nabcd\r\n0\r\n\r\n"))
            cut = rng.randrange(len(base))
            out.append(bytes(base[:cut]) + bytes(rng.randrange(256) for _ in range(rng.randrange(20))))
    return out


def test_garbage_never_crashes(store):
    p = start(store, config={"limits": {"header_timeout_ms": 1000, "body_timeout_ms": 1000}})
    rng = random.Random(int(os.environ.get("FK_SEED", "0")) or None)
    reqs = garbage_requests(rng)

    def send(i):
        for data in reqs[i::8]:
            try:
                with socket.create_connection((p.host, p.port), timeout=3) as s:
                    s.sendall(data)
                    if i % 2:
                        s.shutdown(socket.SHUT_WR)
                    s.settimeout(1.5)
                    try:
                        while s.recv(65536):
                            pass
                    except (socket.timeout, ConnectionResetError):
                        pass
            except (ConnectionResetError, BrokenPipeError):
                pass

    fk.parallel(send, 8)
    check(p.alive(), "fencekeeper died on garbage input (exit %r)" % p.proc.poll())
    expect_status(p.request("GET", "/healthz"), 200, "/healthz after garbage")
    r = p.list_fences()
    expect_status(r, 200)
    # Mutated valid requests may legitimately write (tokens were < 100, and a one-byte
    # mutation cannot make a longer number); nothing else can have set a fence.
    for f in r.json()["fences"]:
        check(f["token"] < 100, "garbage produced an impossible fence %r" % f)
    check(p.alive(), "fencekeeper died")


def test_sigterm_completes_inflight(store):
    p = start(store, config={"shutdown_timeout_ms": 5000})
    idle = p.raw()
    expect_status(idle.request("GET", "/healthz"), 200)   # an idle keep-alive connection
    with p.raw(timeout=10) as c:
        body = b"x" * 1000
        c.send_raw(fk.build_request("PUT", "/v1/resources/inflight", [("Fencing-Token", "3")], body)[:-500])
        time.sleep(0.3)
        p.sigterm()
        time.sleep(0.5)
        check(p.alive(), "exited before finishing the in-flight request")
        c.send_raw(body[-500:])
        r = c.read_response(method="PUT")
        expect_status(r, 201, "in-flight PUT across SIGTERM")
    t0 = time.monotonic()
    rc = p.wait(15)
    eq(rc, 0, "exit status after SIGTERM")
    check(time.monotonic() - t0 < 10, "drain took too long")
    idle.close()
    p.start()
    p.wait_ready()
    eq(p.get("inflight").body, b"x" * 1000, "in-flight write durable after graceful stop")
    # SIGINT too.
    p.signal(2)
    eq(p.wait(15), 0, "exit status after SIGINT")


# ---------------------------------------------------------------------------
# Process-level: CLI, config, exclusive directory lock
# ---------------------------------------------------------------------------

def test_second_instance_on_same_root():
    st = fk.file_store()
    p = start(st)
    rc, out, err = fk.run_binary(["--listen", "127.0.0.1:0", "--store", st.url], timeout=15)
    eq(rc, 2, "second fencekeeper on the same root: exit status (stderr %r)" % err[-500:])
    check(str(p.pid) in err, "message names the holding pid %d: %r" % (p.pid, err[-500:]))
    check(p.alive(), "first instance still running")
    expect_status(p.request("GET", "/healthz"), 200)
    # After the first one is gone (even by kill -9), the directory is free again.
    p.kill()
    q = start(st)
    expect_status(q.request("GET", "/readyz"), 200)


def test_bad_command_line_and_config():
    st = fk.file_store()
    base = ["--listen", "127.0.0.1:0", "--store", st.url]
    cases = [
        (["--bogus-flag"], "--bogus-flag"),
        (["--threads", "abc"], "threads"),
        (["--threads", "-3"], "threads"),
        (["--listen", "nonsense"], "listen"),
        (["--listen", "127.0.0.1:99999"], "listen"),
        (["--log-level", "shouty"], "log"),
        (["--store", "ftp://x"], "store"),
        (["--config", "/nonexistent/fk.json"], "/nonexistent/fk.json"),
        (["--config", fk.write_config({"bogus_key": 1})], "bogus_key"),
        (["--config", fk.write_config({"limits": {"max_body_byte": 5}})], "max_body_byte"),
        (["--config", fk.write_config({"postgres": {"schemaa": "x"}})], "schemaa"),
        (["--config", fk.write_config({"threads": "many"})], "threads"),
        (["--config", fk.write_config({"limits": {"header_timeout_ms": -1}})], "header_timeout_ms"),
        (["--config", fk.write_config("{not json")], ""),
        (["--config", fk.write_config({"operations": {"x": {"sql": "SELECT 1", "bogus": 1}}})], "bogus"),
    ]
    for args, needle in cases:
        rc, out, err = fk.run_binary(base + args, timeout=10)
        what = "fencekeeper %s" % " ".join(args)
        eq(rc, 2, "%s: exit status (stderr %r)" % (what, err[-300:]))
        check(needle.lower() in (err + out).lower(), "%s: message should name %r: %r" % (what, needle, err[-300:]))


def test_flag_overrides_config():
    st = fk.file_store()
    port = fk.free_port()
    cfg = fk.write_config({"listen": "127.0.0.1:%d" % fk.free_port(), "store": st.url, "threads": 2})
    p = fk.Proxy(None, args=["--config", cfg, "--listen", "127.0.0.1:%d" % port], listen=None)
    p.start()
    eq(p.port, port, "--listen overrides the config file's listen")
    eq(p.host, "127.0.0.1", "bound host")
    expect_status(p.put("ovr", b"x", token=1), 201)
    check(os.listdir(st.root), "the config file's store was used")


if __name__ == "__main__":
    fk.main(globals())
