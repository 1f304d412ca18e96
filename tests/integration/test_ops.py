#!/usr/bin/env python3
"""Operability (docs/operations.md): metrics, auth, SIGHUP, overload, memory, SIGTERM
drain, --check-config and the non-loopback warning, against the real binary.

Tests that take a `store` run on the file store and, when FK_TEST_PG_URL is set, on
Postgres. Never sends traffic to a non-loopback address.

Also the hostile inputs of named SQL operations (Postgres only; docs/api.md#post-operation): numbers reach
the database as written, bodies cost what the statement takes, database errors stay in
the log unless an operation exposes them, duplicate keys are refused.

    FENCEKEEPER_BIN=build/fencekeeper python3 tests/integration/test_ops.py [FILTER]
"""

import contextlib
import json
import math
import os
import re
import resource
import signal
import socket
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

import fk
from fk import CheckFailed, check, eq, expect_error, expect_status

SHED_RETRY_AFTER = "1"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Log lines reach stderr within ~50 ms (backends/log/logging.hpp); before counting lines, or
# checking that some are absent, wait this long after the requests that would log them.
LOG_SETTLE = 0.3


# ---------------------------------------------------------------------------
# The Prometheus text exposition format 0.0.4: prometheus_client's parser (Debian's
# python3-prometheus-client) reads it; parse_exposition adds the checks that parser leaves
# out and that Prometheus or our own docs promise.
# ---------------------------------------------------------------------------

def parse_exposition(text):
    """Parses `text` with prometheus_client and checks what that parser lets through: a
    final newline; every family has a TYPE and a HELP (a sample without its TYPE comes back
    as an "unknown" family); a family's samples are contiguous (else it comes back twice);
    no (name, labels) pair twice; no negative counter; histograms have ascending `le`,
    cumulative buckets, +Inf == _count, and a _sum. Returns
    {(name, frozenset(labels.items())): value} and {family name: type}."""
    check(text.endswith("\n"), "exposition does not end with a newline")
    try:
        parsed = list(text_string_to_metric_families(text))
    except ValueError as e:
        raise CheckFailed("exposition does not parse: %s" % e)
    families = {}
    samples = {}
    for fam in parsed:
        check(fam.name not in families, "family %s appears twice (split)" % fam.name)
        check(fam.type != "unknown", "family %s has no TYPE" % fam.name)
        check(fam.documentation, "family %s has no HELP" % fam.name)
        families[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            check(key not in samples, "series %s%s given twice" % (s.name, s.labels))
            samples[key] = s.value
            if fam.type == "counter":
                check(s.value >= 0, "negative counter %s%s" % (s.name, s.labels))
        if fam.type == "histogram":
            check_histogram(fam.name, samples)
    return samples, families


def check_histogram(fam, samples):
    series = {}
    for (name, labels), value in samples.items():
        if name == fam + "_bucket":
            d = dict(labels)
            le = d.pop("le", None)
            check(le is not None, "%s_bucket without le" % fam)
            series.setdefault(frozenset(d.items()), []).append((float(le), value))
    check(series, "histogram %s has no buckets" % fam)
    for labels, buckets in series.items():
        les = [le for le, _ in buckets]
        check(les == sorted(les), "%s%s: le not ascending" % (fam, dict(labels)))
        check(les[-1] == math.inf, "%s%s: no +Inf bucket" % (fam, dict(labels)))
        counts = [v for _, v in buckets]
        check(all(a <= b for a, b in zip(counts, counts[1:])),
              "%s%s: buckets not cumulative: %r" % (fam, dict(labels), counts))
        count = samples.get((fam + "_count", labels))
        check(count is not None, "%s%s: no _count" % (fam, dict(labels)))
        eq(counts[-1], count, "%s%s: +Inf bucket vs _count" % (fam, dict(labels)))
        check((fam + "_sum", labels) in samples, "%s%s: no _sum" % (fam, dict(labels)))


def S(name, **labels):
    return (name, frozenset(labels.items()))


def scrape(client, headers=None):
    r = client.request("GET", "/metrics", headers=headers)
    expect_status(r, 200, "/metrics")
    eq(r.header("Content-Type"), METRICS_CONTENT_TYPE, "metrics Content-Type")
    samples, families = parse_exposition(r.text)
    return samples


def start(store, config=None, **kw):
    p = store.start(config=config, **kw)
    p.wait_ready()
    return p


# ---------------------------------------------------------------------------
# The parser itself
# ---------------------------------------------------------------------------

def test_exposition_parser_rejects_bad_input():
    good = ("# HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"1\"} 3\n"
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
            "h_sum 3.5\nh_count 2\n")
    samples, _ = parse_exposition(good)
    eq(samples[S("x_total", a="1")], 3, "parsed value")
    bad = [
        good.replace("h_count 2", "h_count 3"),                     # +Inf != count
        good.replace('h_bucket{le="1"} 1', 'h_bucket{le="1"} 5'),   # not cumulative
        good.replace("# TYPE x_total counter\n", ""),               # no TYPE
        good.replace("# HELP x_total X.\n", ""),                    # no HELP
        good.replace('{a="1"}', '{a=1}'),                           # unquoted label
        good.replace("3.5", "3.5.1"),                               # bad value
        good + "x_total{a=\"1\"} 4\n",                              # not contiguous
        good.replace('x_total{a="1"} 3', 'x_total{a="1"} 3\nx_total{a="1"} 4'),  # dup
        good.replace('x_total{a="1"} 3', 'x_total{a="1"} -3'),     # negative counter
        good.replace("h_sum 3.5\n", ""),                            # no _sum
        good[:-1],                                                  # no final newline
    ]
    for i, text in enumerate(bad):
        try:
            parse_exposition(text)
        except CheckFailed:
            continue
        fk.fail("bad exposition #%d accepted" % i)


# ---------------------------------------------------------------------------
# Metrics: exact values after a scripted sequence
# ---------------------------------------------------------------------------

def test_metrics_exact(store):
    p = start(store)
    with p.client() as c:
        # Other connections (wait_ready's) must be gone before the gauges are compared.
        deadline = time.monotonic() + 5
        while True:
            before = scrape(c)
            if before[S("fencekeeper_open_connections")] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        eq(before[S("fencekeeper_open_connections")], 1, "open connections (this one)")
        eq(before[S("fencekeeper_inflight_requests")], 1, "in flight (the scrape itself)")
        eq(before[S("fencekeeper_store_ready")], 1, "store ready")
        check(any(n == "fencekeeper_build_info" and v == 1 for (n, _), v in before.items()),
              "build_info")

        expect_status(c.put("a", b"one", token=5), 201)
        expect_status(c.put("a", b"two", token=6), 200)
        expect_error(c.put("a", b"old", token=3, headers={"X-Request-Id": "stale-req-1"}),
                     409, "stale_token")                                         # gap 3
        expect_error(c.put("a", b"x", token=6, headers={"If-Match": '"99"'}), 412,
                     "precondition_failed")
        expect_error(c.put("a", b"x", token=7, lock="other"), 409, "lock_mismatch")
        expect_error(c.put("b", b"x"), 428, "missing_token")
        expect_error(c.request("PUT", "/v1/resources/b", body=b"x",
                               headers={"Fencing-Token": "x1"}), 400, "invalid_token")
        expect_error(c.get("nope"), 404, "not_found")
        expect_status(c.put_fence("L", 10), 200)
        expect_error(c.put_fence("L", 9), 409, "stale_token")                    # gap 1
        expect_status(c.delete("a", token=6), 204)
        expect_error(c.request("GET", "/nope"), 404, "not_found")
        expect_status(c.fence("L"), 200)
        expect_status(c.healthz(), 200)
        after = scrape(c)

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    R = "fencekeeper_requests_total"
    expected_requests = {
        ("resource", "201"): 1, ("resource", "200"): 1, ("resource", "409"): 2,
        ("resource", "412"): 1, ("resource", "428"): 1, ("resource", "400"): 1,
        ("resource", "404"): 1, ("resource", "204"): 1,
        ("fence", "200"): 2, ("fence", "409"): 1,
        ("not_found", "404"): 1, ("healthz", "200"): 1,
        ("metrics", "200"): 1,  # the first scrape; a scrape is counted after it is sent
    }
    seen = {}
    for (name, labels), value in after.items():
        if name == R:
            d = dict(labels)
            seen[(d["route"], d["code"])] = value - before.get((name, labels), 0)
    seen = {k: v for k, v in seen.items() if v}
    eq(seen, expected_requests, "requests_total deltas")

    writes = {r: delta(S("fencekeeper_writes_total", result=r))
              for r in ("applied", "stale", "precondition_failed", "error")}
    eq(writes, {"applied": 4, "stale": 2, "precondition_failed": 1, "error": 1}, "writes_total")
    eq(delta(S("fencekeeper_lock_mismatch_total")), 1, "lock_mismatch_total")

    gap = {le: delta(S("fencekeeper_stale_token_gap_bucket", le=le))
           for le in ("1", "2", "5", "10", "+Inf")}
    eq(gap, {"1": 1, "2": 1, "5": 2, "10": 2, "+Inf": 2}, "stale gap buckets")
    eq(delta(S("fencekeeper_stale_token_gap_sum")), 4, "stale gap sum")
    eq(delta(S("fencekeeper_stale_token_gap_count")), 2, "stale gap count")

    ops = {op: delta(S("fencekeeper_store_duration_seconds_count", op=op))
           for op in ("put", "delete", "get", "fence_advance", "fence_read", "fence_list",
                      "operation")}
    eq(ops, {"put": 5, "delete": 1, "get": 1, "fence_advance": 2, "fence_read": 1,
             "fence_list": 0, "operation": 0}, "store_duration_seconds_count")
    for kind in ("unavailable", "outcome_unknown", "internal"):
        eq(after[S("fencekeeper_store_errors_total", kind=kind)], 0, "store errors " + kind)

    # Group commit: one request at a time makes every batch a batch of one. Both stores
    # get both PUTs, the If-Match and lock-mismatch PUTs (their committers decide them)
    # and the DELETE; the file store also commits the fence advance in a batch. Stale
    # writes never reach either: the fence cache refuses them.
    B = "fencekeeper_store_batch_size"
    batched = {"postgres": 5, "file": 6}[store.kind]
    eq((delta(S(B + "_count")), delta(S(B + "_sum")), delta(S(B + "_bucket", le="1")),
        delta(S(B + "_bucket", le="+Inf"))), (batched,) * 4, "batch_size: %d batches of one" % batched)

    durations = {r: delta(S("fencekeeper_request_duration_seconds_count", route=r))
                 for r in ("resource", "fence", "not_found", "healthz")}
    eq(durations, {"resource": 9, "fence": 3, "not_found": 1, "healthz": 1},
       "request_duration_seconds_count")
    eq(after[S("fencekeeper_inflight_requests")], 1, "in flight after")
    eq(delta(S("fencekeeper_shed_requests_total")), 0, "nothing shed")
    eq(delta(S("fencekeeper_connections_rejected_total")), 0, "nothing rejected")
    # No label names a key or a lock.
    for (name, labels) in after:
        for k, v in labels:
            check(k in ("route", "code", "result", "op", "kind", "reason", "le", "version"),
                  "unexpected label %s on %s" % (k, name))

    # The stale rejection is logged at warn with everything an operator needs.
    line = p.wait_log(lambda o: o.get("msg") == "rejected stale write"
                      and o.get("request_id") == "stale-req-1")
    eq(line["level"], "warn", "stale log level")
    for k, v in {"lock": "a", "key": "a", "token": 3, "fence": 6, "gap": 3}.items():
        eq(line.get(k), v, "stale log field " + k)
    check(re.match(r"^127\.0\.0\.1:\d+$", line.get("peer", "")), "stale log peer %r" % line)
    # Fence advances are debug lines: none at the default level.
    check(not [o for o in p.log_lines() if o.get("level") == "debug"], "debug lines at info")



def test_stale_log_line_fields_as_documented():
    """docs/operations.md's "Logs" table names every field of a real `rejected stale write`
    line, one with all of them set: a scoped client's write refused by a fence floor."""
    d = fk.tmpdir("stale-log")
    token_file = os.path.join(d, "ops.token")
    write_token(token_file, "ops-t0ken")
    p = start(fk.file_store(), config={"auth": {"clients": [
        {"name": "ops", "token_file": token_file, "write_prefixes": [""], "admin": True}]}})
    auth = {"Authorization": "Bearer ops-t0ken"}
    r = p.request("PUT", "/v1/floors?prefix=fl%2F", headers=dict(auth, **{"Fencing-Token": "50"}))
    expect_status(r, 200, "PUT floor")
    r = p.put("fl/x", b"zombie", token=10, headers=dict(auth, **{"X-Request-Id": "floor-stale-1"}))
    expect_error(r, 409, "stale_token", "a write below the floor")
    line = p.wait_log(lambda o: o.get("request_id") == "floor-stale-1")
    eq((line.get("msg"), line.get("client"), line.get("floor"), line.get("fence")),
       ("rejected stale write", "ops", "fl/", 50), "the line of a floor's refusal")
    text = open(os.path.join(fk.REPO, "docs", "operations.md")).read()
    row = re.search(r"^\| `rejected stale write` \| warn \| (.*?) \|", text, re.M)
    check(row is not None, "operations.md has a row for rejected stale write")
    documented = re.findall(r"`(\w+)`", row.group(1))
    eq(sorted(documented), sorted(k for k in line if k not in ("ts", "level", "msg")),
       "the fields operations.md names for rejected stale write")
    p.stop()

def test_metrics_head_and_methods(store):
    p = start(store)
    h = p.request("HEAD", "/metrics")
    eq((h.status, h.body), (200, b""), "HEAD /metrics")
    eq(h.header("Content-Type"), METRICS_CONTENT_TYPE, "HEAD Content-Type")
    check(int(h.header("Content-Length")) > 1000, "HEAD Content-Length")
    r = p.request("POST", "/metrics", body=b"")
    expect_error(r, 405, "method_not_allowed")


# ---------------------------------------------------------------------------
# Auth
# ---------------------------------------------------------------------------

def write_token(path, token):
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)


def check_auth_enforced(p, token):
    good = {"Authorization": "Bearer " + token}
    with p.client() as c:
        for hdrs, what in [({}, "missing"), ({"Authorization": "Bearer wrong"}, "wrong"),
                           ({"Authorization": "Basic " + token}, "other scheme"),
                           ({"Authorization": token}, "no scheme")]:
            r = c.request("GET", "/v1/resources/k", headers=dict(hdrs, **{"X-Request-Id": "auth-1"}))
            expect_error(r, 401, "unauthorized", what)
            eq(r.header("WWW-Authenticate"), "Bearer", what + ": WWW-Authenticate")
            eq(r.header("X-Request-Id"), "auth-1", what + ": X-Request-Id")
        # Everything but /healthz and /readyz needs the token, unknown paths included.
        for method, path in [("GET", "/metrics"), ("GET", "/v1/fences"), ("GET", "/nope"),
                             ("GET", "/"), ("GET", "/healthz/"), ("PUT", "/v1/fences/L")]:
            expect_error(c.request(method, path), 401, "unauthorized", path)
        expect_status(c.healthz(), 200, "healthz open")
        expect_status(c.readyz(), 200, "readyz open")
        # A write without the token writes nothing.
        expect_error(c.put("k", b"x", token=5), 401, "unauthorized")
        expect_error(c.get("k", headers=good), 404, "not_found", "not written")
        expect_error(c.request("GET", "/v1/fences/k", headers=good), 404, "not_found",
                     "not fenced")
        # The right token works, the scheme in any case.
        expect_status(c.put("k", b"x", token=5, headers=good), 201)
        expect_status(c.get("k", headers={"Authorization": "bearer  " + token}), 200)
        expect_status(c.request("GET", "/metrics", headers=good), 200)
    # Authorization given twice is refused even when both are right.
    with p.raw() as raw:
        r = raw.request("GET", "/v1/resources/k", headers=[("Authorization", "Bearer " + token),
                                                           ("Authorization", "Bearer " + token)])
        expect_error(r, 401, "unauthorized", "two Authorization fields")
    # 401 comes before the body is read: a head announcing a large body is answered
    # without sending it, and the connection is closed.
    with p.raw() as raw:
        raw.send_raw(fk.build_request("PUT", "/v1/resources/big",
                                      [("Fencing-Token", "9"), ("Content-Length", "5000000")]))
        r = raw.read_response(timeout=5)
        expect_error(r, 401, "unauthorized", "before the body")
        eq(r.header("Connection"), "close", "401 with a body pending closes")
    with p.client() as c:
        expect_error(c.get("big", headers=good), 404, "not_found", "big not written")
        s = scrape(c, headers=good)
    check(s.get(S("fencekeeper_requests_total", route="resource", code="401"), 0) >= 6,
          "401s counted")
    p.wait_log(lambda o: o.get("msg") == "unauthorized request" and o.get("request_id") == "auth-1")
    check(token not in p.stderr_text(), "the token appears in the log")


def test_auth_off_by_default(store):
    p = start(store)
    expect_status(p.put("k", b"x", token=1), 201)
    expect_status(p.request("GET", "/metrics"), 200)
    line = p.wait_log(lambda o: o.get("msg") == "listening")
    eq(line.get("auth"), False, "listening line says auth off")


def test_auth_token_file(store):
    d = fk.tmpdir("auth")
    path = os.path.join(d, "token")
    token = "tok-" + fk.rand_name(24)
    write_token(path, token)
    p = store.start(args=["--auth-token-file", path])
    p.wait_ready()
    check_auth_enforced(p, token)


def test_auth_token_config_key(store):
    d = fk.tmpdir("auth")
    path = os.path.join(d, "token")
    token = "cfg-" + fk.rand_name(24)
    write_token(path, token)
    p = start(store, config={"auth_token_file": path})
    expect_error(p.put("k", b"x", token=1), 401, "unauthorized")
    expect_status(p.put("k", b"x", token=1, headers={"Authorization": "Bearer " + token}), 201)


def test_auth_env(store):
    token = "env-" + fk.rand_name(24)
    p = start(store, env={"FENCEKEEPER_AUTH_TOKEN": token})
    check_auth_enforced(p, token)
    eq(p.wait_log(lambda o: o.get("msg") == "listening").get("auth"), True, "auth on")


def test_auth_fails_closed():
    d = fk.tmpdir("auth")
    store = "file:" + os.path.join(d, "data")
    rc, out, err = fk.run_binary(["--listen", "127.0.0.1:0", "--store", store,
                                  "--auth-token-file", os.path.join(d, "missing")])
    eq(rc, 2, "missing token file: exit status (stderr %r)" % err)
    check("missing" in err, "message names the file: %r" % err)
    empty = os.path.join(d, "empty")
    write_token(empty, "")
    rc, out, err = fk.run_binary(["--listen", "127.0.0.1:0", "--store", store,
                                  "--auth-token-file", empty])
    eq(rc, 2, "empty token file")
    rc, out, err = fk.run_binary(["--listen", "127.0.0.1:0", "--store", store],
                                 env={"FENCEKEEPER_AUTH_TOKEN": "  "})
    eq(rc, 2, "blank FENCEKEEPER_AUTH_TOKEN")
    check("FENCEKEEPER_AUTH_TOKEN" in err, "message names the variable: %r" % err)
    check("listening" not in out, "did not start")


# ---------------------------------------------------------------------------
# SIGHUP
# ---------------------------------------------------------------------------

def test_sighup_rotates_token_and_log_level(store):
    d = fk.tmpdir("hup")
    path = os.path.join(d, "token")
    write_token(path, "old-token")
    p = start(store, config={"log_level": "info"}, args=["--auth-token-file", path])
    config_path = os.path.join(p.dir, "config.json")
    old = {"Authorization": "Bearer old-token"}
    new = {"Authorization": "Bearer new-token"}
    with p.client() as c:
        expect_status(c.put("k", b"1", token=1, headers=old), 201)
        expect_error(c.put("k", b"1", token=1, headers=new), 401, "unauthorized")
    time.sleep(LOG_SETTLE)
    check(not [o for o in p.log_lines() if o.get("level") == "debug"], "no debug lines yet")

    write_token(path, "new-token")
    with open(config_path, "w") as f:  # the proxy's own config file, rewritten in place
        json.dump(dict(p.config, log_level="debug"), f)
    n = len([o for o in p.log_lines() if o.get("msg") == "reloaded auth token and log level"])
    p.signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while len([o for o in p.log_lines() if o.get("msg") == "reloaded auth token and log level"]) <= n:
        check(time.monotonic() < deadline, "no reload line: %s" % p.stderr_text()[-2000:])
        time.sleep(0.05)
    check(p.alive(), "SIGHUP killed the process")
    with p.client() as c:
        expect_error(c.put("k", b"2", token=2, headers=dict(old, **{"X-Request-Id": "old-after"})),
                     401, "unauthorized", "old token after rotation")
        expect_status(c.put("k", b"2", token=2, headers=dict(new, **{"X-Request-Id": "new-1"})), 200)
        eq(c.get("k", headers=new).body, b"2", "written with the new token")
    # Debug lines now appear: the fence advance of the write, with its request id.
    line = p.wait_log(lambda o: o.get("level") == "debug" and o.get("msg") == "fence advanced"
                      and o.get("request_id") == "new-1")
    eq((line.get("lock"), line.get("key"), line.get("token")), ("k", "k", 2), "fence advance log")

    # A broken token file: an error line, and the current token stays.
    write_token(path, "")
    p.signal(signal.SIGHUP)
    p.wait_log(lambda o: o.get("level") == "error" and o.get("msg", "").startswith("reload failed"))
    check(p.alive(), "alive after a failed reload")
    with p.client() as c:
        expect_status(c.get("k", headers=new), 200, "token kept after a failed reload")
        expect_error(c.get("k", headers=old), 401, "unauthorized")
    # Back to a good state, and a flag still overrides the file: no flag here, so the file's
    # level applies; at warn the debug lines stop.
    write_token(path, "third-token")
    with open(config_path, "w") as f:
        json.dump(dict(p.config, log_level="warn"), f)
    p.signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while True:
        r = p.request("GET", "/v1/resources/k", headers={"Authorization": "Bearer third-token"})
        if r.status == 200:
            break
        check(time.monotonic() < deadline, "third token never accepted: %r" % r)
        time.sleep(0.05)
    # The 401s of the polling loop above logged debug lines; let them reach stderr first.
    time.sleep(LOG_SETTLE)
    ndebug = len([o for o in p.log_lines() if o.get("level") == "debug"])
    expect_status(p.put("k", b"3", token=3, headers={"Authorization": "Bearer third-token"}), 200)
    time.sleep(LOG_SETTLE)
    eq(len([o for o in p.log_lines() if o.get("level") == "debug"]), ndebug, "no debug at warn")
    eq(p.stop(), 0, "exit status after reloads")


def test_sighup_flag_overrides_file(store):
    p = start(store, config={"log_level": "debug"}, log_level="warn")
    config_path = os.path.join(p.dir, "config.json")
    p.signal(signal.SIGHUP)
    time.sleep(0.5)
    expect_status(p.put("k", b"x", token=1), 201)
    time.sleep(0.2)
    check(not [o for o in p.log_lines() if o.get("level") in ("debug", "info")],
          "--log-level warn lost to the file on reload")
    check(p.alive(), "alive")
    check(os.path.exists(config_path), "config file used")


def test_debug_log_one_line_per_fence_advance(store):
    # docs/operations.md "Logs": at debug, each applied write, delete or fence advance logs
    # exactly one `fence advanced` line, and it carries the request's request_id and peer.
    p = start(store, log_level="debug")
    expect_status(p.put("adv/k", b"1", token=5, lock="adv", headers={"X-Request-Id": "adv-put"}),
                  201)
    r = p.put_fence("adv", 7, headers={"X-Request-Id": "adv-fence"})
    check(r.status in (200, 201), "PUT fence: %d %r" % (r.status, r.body[:300]))
    expect_status(p.delete("adv/k", token=8, lock="adv", headers={"X-Request-Id": "adv-delete"}),
                  204)
    p.wait_log(lambda o: o.get("msg") == "fence advanced" and o.get("request_id") == "adv-delete")
    time.sleep(LOG_SETTLE)
    lines = [o for o in p.log_lines() if o.get("msg") == "fence advanced"]
    eq(sorted(((o.get("request_id"), o.get("lock"), o.get("key"), o.get("token")) for o in lines),
              key=repr),
       [("adv-delete", "adv", "adv/k", 8), ("adv-fence", "adv", None, 7),
        ("adv-put", "adv", "adv/k", 5)],
       "fence advanced lines (request_id, lock, key, token)")
    for o in lines:
        check(re.match(r"^127\.0\.0\.1:\d+$", str(o.get("peer"))), "peer of %r" % o)
        eq(o.get("level"), "debug", "level of %r" % o)


# ---------------------------------------------------------------------------
# Overload
# ---------------------------------------------------------------------------

def test_max_connections(store):
    p = start(store, config={"limits": {"max_connections": 3}})
    time.sleep(0.3)  # wait_ready's connection is closed
    held = []
    for i in range(3):
        rc = p.raw()
        expect_status(rc.request("GET", "/healthz"), 200, "connection %d" % i)
        held.append(rc)
    # The fourth is accepted and closed at once, without a response.
    for attempt in range(3):
        with p.raw() as extra:
            with contextlib.suppress(OSError):
                extra.send_raw(fk.build_request("GET", "/healthz"))
            check(extra.is_closed(timeout=3), "connection beyond max_connections not closed")
            eq(extra.buf, b"", "a refused connection gets no response")
    # The held connections keep working.
    for rc in held:
        expect_status(rc.request("GET", "/healthz"), 200, "held connection still served")
    # A freed slot is usable again.
    held.pop().close()
    deadline = time.monotonic() + 5
    while True:
        try:
            with p.raw() as rc:
                rc.send("GET", "/metrics")
                r = rc.read_response(timeout=2)
                break
        except (fk.ConnectionClosed, OSError):
            check(time.monotonic() < deadline, "slot never freed")
            time.sleep(0.05)
    samples, _ = parse_exposition(r.text)
    check(samples[S("fencekeeper_connections_rejected_total")] >= 3, "rejections counted")
    eq(samples[S("fencekeeper_open_connections")], 3, "open connections")
    for rc in held:
        rc.close()


def slow_put(p, key, token, size):
    """A PUT whose head and first body byte are sent; the rest waits. Returns the RawConn."""
    rc = p.raw(timeout=20)
    rc.send_raw(fk.build_request("PUT", "/v1/resources/" + key,
                                 [("Fencing-Token", str(token)), ("Content-Length", str(size))]))
    rc.send_raw(b"x")
    return rc


def wait_metric(p, key, value, headers=None, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        with p.client() as c:
            s = scrape(c, headers)
        if s.get(key) == value:
            return s
        check(time.monotonic() < deadline, "metric %r: %r, want %r" % (key, s.get(key), value))
        time.sleep(0.05)


def test_max_inflight_sheds(store):
    # Two slow uploads hold both slots (the permit is taken before the body is read).
    # Scrapes are exempt from the limit, so they show the uploads in flight.
    p = start(store, config={"limits": {"max_inflight_requests": 2}})
    slow = [slow_put(p, "slow%d" % i, 1, 1000) for i in range(2)]
    wait_metric(p, S("fencekeeper_inflight_requests"), 3)  # 2 uploads + this scrape
    results = {}

    def burst(i):
        with p.client() as c:
            r = c.put("shed%d" % i, b"data", token=7, headers={"X-Request-Id": "shed-%d" % i})
            results[i] = r

    fk.parallel(burst, 20)
    for i, r in results.items():
        expect_error(r, 503, "unavailable", "burst %d" % i)
        eq(r.header("Retry-After"), SHED_RETRY_AFTER, "Retry-After")
        eq(r.header("X-Request-Id"), "shed-%d" % i, "X-Request-Id on a shed 503")
    # A GET is shed too, and the connection stays open when no body is pending.
    with p.raw() as rc:
        for i in range(2):
            r = rc.request("GET", "/v1/resources/slow0")
            expect_error(r, 503, "unavailable", "GET shed (%d on one connection)" % i)
            eq(r.header("Retry-After"), SHED_RETRY_AFTER, "Retry-After")
        # Probes and scrapes still answer under full load.
        expect_status(rc.request("GET", "/healthz"), 200, "healthz under load")
        expect_status(rc.request("GET", "/readyz"), 200, "readyz under load")
        expect_status(rc.request("GET", "/metrics"), 200, "metrics under load")
    # Finish the uploads: they were admitted and are written.
    for i, rc in enumerate(slow):
        rc.send_raw(b"y" * 999)
        expect_status(rc.read_response(), 201, "slow upload %d" % i)
        rc.close()
    with p.client() as c:
        for i in range(20):
            expect_error(c.get("shed%d" % i), 404, "not_found", "shed write not applied")
            expect_error(c.request("GET", "/v1/fences/shed%d" % i), 404, "not_found",
                         "shed write did not fence")
        eq(len(c.get("slow0").body), 1000, "slow upload body")
        s = scrape(c)
    eq(s[S("fencekeeper_shed_requests_total")], 22, "shed counted")
    eq(s[S("fencekeeper_requests_total", route="resource", code="503")], 22, "503s by route")
    eq(s[S("fencekeeper_writes_total", result="applied")], 2, "only the admitted writes")
    # The shed was not a store error.
    eq(s[S("fencekeeper_store_errors_total", kind="unavailable")], 0, "no store error")
    # After the load, requests go through again.
    expect_status(p.put("after", b"x", token=1), 201)


def test_inflight_burst(store):
    # A real burst against a limit of 1: every answer is a success or a clean shed, and
    # exactly the successes were written.
    p = start(store, config={"limits": {"max_inflight_requests": 1}})
    results = {}

    def burst(i):
        with p.client() as c:
            results[i] = c.put("b%d" % i, b"v%d" % i, token=1)

    fk.parallel(burst, 32)
    ok = [i for i, r in results.items() if r.status == 201]
    shed = [i for i, r in results.items() if r.status == 503]
    eq(len(ok) + len(shed), 32, "only 201 or 503: %r" % sorted({r.status for r in results.values()}))
    for i in shed:
        eq(results[i].header("Retry-After"), SHED_RETRY_AFTER, "Retry-After")
    time.sleep(0.1)
    for i in range(32):
        r = p.get("b%d" % i)
        if r.status == 503:  # our own read may be shed: retry
            time.sleep(0.05)
            r = p.get("b%d" % i)
        eq(r.status, 200 if i in ok else 404, "b%d written iff acknowledged" % i)
    print("    burst of 32 at max_inflight_requests=1: %d written, %d shed" % (len(ok), len(shed)))


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------

def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise CheckFailed("no VmRSS for pid %d" % pid)


def skip_under_asan(p):
    """ASan keeps freed memory in quarantine (256 MiB by default) and maps shadow memory:
    RSS then measures the sanitizer, not fencekeeper."""
    if fk.under_asan(p.pid):
        raise fk.Skip("RSS bounds are not meaningful under AddressSanitizer")


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def churn(p, total, batch, request=True):
    """Opens `total` connections, `batch` at a time; each sends GET /healthz (when
    `request`) and reads the answer; then the batch is closed. Returns (answered,
    refused, peak RSS in KiB)."""
    answered = refused = 0
    peak = 0
    req = fk.build_request("GET", "/healthz")
    done = 0
    while done < total:
        n = min(batch, total - done)
        socks = []
        for _ in range(n):
            s = socket.socket()
            s.settimeout(10)
            s.connect((p.host, p.port))
            socks.append(s)
        if request:
            for s in socks:
                try:
                    s.sendall(req)
                except OSError:
                    pass
            for s in socks:
                try:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    if data.startswith(b"HTTP/1.1 200"):
                        answered += 1
                    else:
                        refused += 1
                except OSError:
                    refused += 1
        peak = max(peak, rss_kib(p.pid))
        for s in socks:
            s.close()
        done += n
    return answered, refused, peak


def wait_connections_closed(p, timeout=10):
    return wait_metric(p, S("fencekeeper_open_connections"), 1, timeout=timeout)


# Growth bound for 10k connections, and why: a session costs ~20 KiB while open (a 16 KiB
# read buffer, the coroutine frame, the socket), so a per-connection leak of even a
# third of that over 10000 connections would exceed 64 MiB, while one batch of 1000 live
# connections (~20 MiB) that the allocator keeps after they close stays well below it.
RSS_GROWTH_BOUND_KIB = 64 * 1024
CHURN_TOTAL = 10000


def test_rss_bounded_10k_connections():
    nofile = raise_nofile(8192)
    batch = max(50, min(1000, (nofile - 100) // 2))
    st = fk.file_store()
    p = start(st, config={"threads": 2})
    skip_under_asan(p)
    # Warm up: the first requests allocate per-thread state that is not a leak.
    churn(p, 200, 100)
    wait_connections_closed(p)
    before = rss_kib(p.pid)
    t0 = time.monotonic()
    answered, refused, peak = churn(p, CHURN_TOTAL, batch)
    s = wait_connections_closed(p)
    after = rss_kib(p.pid)
    print("    RSS before %d KiB, peak %d KiB (batch %d), after %d KiB; growth %+d KiB; "
          "%d connections in %.1fs"
          % (before, peak, batch, after, after - before, CHURN_TOTAL, time.monotonic() - t0))
    eq((answered, refused), (CHURN_TOTAL, 0), "every connection answered")
    check(after - before < RSS_GROWTH_BOUND_KIB,
          "RSS grew by %d KiB over %d connections" % (after - before, CHURN_TOTAL))
    check(s[S("fencekeeper_requests_total", route="healthz", code="200")] >= CHURN_TOTAL,
          "every request counted")


def test_rss_bounded_under_connection_overload():
    # 10000 connection attempts against max_connections=200, 1000 at a time: 800 of each
    # batch are refused at accept; memory stays bounded and service continues.
    nofile = raise_nofile(8192)
    batch = max(50, min(1000, (nofile - 100) // 2))
    limit = min(200, batch // 2)
    st = fk.file_store()
    p = start(st, config={"threads": 2, "limits": {"max_connections": limit}})
    skip_under_asan(p)
    churn(p, 200, 100)
    wait_connections_closed(p)
    before = rss_kib(p.pid)
    answered, refused, peak = churn(p, CHURN_TOTAL, batch)
    s = wait_connections_closed(p)
    after = rss_kib(p.pid)
    print("    overload: max_connections %d, batch %d: %d answered, %d refused; RSS before %d KiB, "
          "peak %d KiB, after %d KiB (growth %+d KiB)"
          % (limit, batch, answered, refused, before, peak, after, after - before))
    eq(answered + refused, CHURN_TOTAL, "every attempt accounted for")
    check(refused > 0 and answered > 0, "some refused, some served")
    check(s[S("fencekeeper_connections_rejected_total")] >= refused * 0.9,
          "rejections counted: %r vs %d" % (s[S("fencekeeper_connections_rejected_total")], refused))
    check(after - before < RSS_GROWTH_BOUND_KIB, "RSS grew by %d KiB" % (after - before))
    expect_status(p.put("still", b"ok", token=1), 201, "service continues")


# ---------------------------------------------------------------------------
# SIGTERM
# ---------------------------------------------------------------------------

def test_sigterm_finishes_slow_upload(store):
    p = start(store, config={"shutdown_timeout_ms": 15000})
    expect_status(p.put("acked", b"before sigterm", token=3), 201)
    body = bytes(range(256)) * 120  # 30720 bytes
    rc = p.raw(timeout=30)
    rc.send_raw(fk.build_request("PUT", "/v1/resources/slow",
                                 [("Fencing-Token", "4"), ("Content-Length", str(len(body))),
                                  ("X-Request-Id", "slow-1")]))
    rc.send_raw(body[:1000])
    wait_metric(p, S("fencekeeper_inflight_requests"), 2)  # the upload + the scrape
    p.sigterm()
    p.wait_log(lambda o: o.get("msg") == "signal received: draining")
    # Still draining: the upload continues in pieces.
    for i in range(1000, len(body), 5000):
        time.sleep(0.2)
        check(p.alive(), "exited before the in-flight upload finished")
        rc.send_raw(body[i:i + 5000])
    r = rc.read_response()
    expect_status(r, 201, "slow upload during drain")
    eq(r.header("Connection"), "close", "drained connection closes")
    eq(r.header("X-Request-Id"), "slow-1", "request id")
    rc.close()
    eq(p.wait(20), 0, "exit status after drain")
    p.start()
    p.wait_ready()
    eq(p.get("acked").body, b"before sigterm", "write acknowledged before SIGTERM")
    eq(p.get("slow").body, body, "write finished during the drain")
    eq(p.fence("slow").json()["token"], 4, "fence of the drained write")


def test_sigterm_deadline(store):
    # An upload that never finishes is cut off at shutdown_timeout_ms; exit status 0.
    p = start(store, config={"shutdown_timeout_ms": 800})
    rc = slow_put(p, "never", 1, 1000)
    time.sleep(0.2)
    t0 = time.monotonic()
    p.sigterm()
    eq(p.wait(10), 0, "exit status")
    took = time.monotonic() - t0
    check(0.7 <= took < 5, "drain took %.2fs, deadline 0.8s" % took)
    check(rc.is_closed(2), "connection closed at the deadline")
    rc.close()
    p.start()
    p.wait_ready()
    expect_error(p.get("never"), 404, "not_found", "unfinished upload not written")


# ---------------------------------------------------------------------------
# file.io_threads: the file store's blocking pool
# ---------------------------------------------------------------------------

def test_file_io_threads():
    # One thread stages every body in turn; concurrent writes still all commit, each key
    # holds its own body, and a zombie's write is still refused. Three threads for contrast.
    for n in (1, 3):
        p = start(fk.file_store(), config={"file": {"io_threads": n}})
        statuses = {}
        errors = []

        def writer(i):
            try:
                with p.client() as c:
                    for j in range(20):
                        key = "iot/%d-%d" % (i, j)
                        statuses[key] = c.put(key, b"body-%d-%d" % (i, j), token=5 + j,
                                              lock="iot-L%d" % i).status
            except Exception as e:  # reported below, in the main thread
                errors.append(repr(e))

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        eq(errors, [], "io_threads %d: writer errors" % n)
        eq(len(statuses), 160, "io_threads %d: writes answered" % n)
        eq(sorted(set(statuses.values())), [201], "io_threads %d: statuses" % n)
        with p.client() as c:
            expect_error(c.put("iot/3-19", b"zombie", token=7, lock="iot-L3"), 409,
                         "stale_token", "io_threads %d: zombie" % n)
            for key in ("iot/0-0", "iot/3-19", "iot/7-11"):
                i, j = key[4:].split("-")
                r = c.get(key)
                eq((r.status, r.body), (200, b"body-%s-%s" % (i.encode(), j.encode())),
                   "io_threads %d: GET %s" % (n, key))
        p.stop()


# ---------------------------------------------------------------------------
# --check-config, --version, the non-loopback warning, redaction
# ---------------------------------------------------------------------------

def test_check_config():
    d = fk.tmpdir("check")
    data = os.path.join(d, "data")
    token = os.path.join(d, "token")
    write_token(token, "t0ken")
    good = fk.write_config({"listen": "127.0.0.1:0", "store": "file:" + data,
                            "auth_token_file": token, "limits": {"max_inflight_requests": 8}})
    # A port in use does not matter: nothing is bound.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        rc, out, err = fk.run_binary(["--check-config", "--config", good,
                                      "--listen", "127.0.0.1:%d" % port])
    eq((rc, out), (0, "config ok\n"), "good config (stderr %r)" % err)
    check(not os.path.exists(data), "--check-config opened the store")

    rc, out, err = fk.run_binary(["--check-config"], cwd=d)
    eq((rc, out.strip()), (0, "config ok"), "defaults")
    check(not os.path.exists(os.path.join(d, "data")), "default store not created")

    cases = [
        (["--config", fk.write_config({"limits": {"max_bodyy": 1}})], "limits.max_bodyy"),
        (["--config", fk.write_config('{"threads": 2,}')], "invalid JSON"),
        (["--config", os.path.join(d, "nope.json")], "nope.json"),
        (["--store", "mysql://x"], "--store"),
        (["--store", "postgresql://127.0.0.1:1/app?nosuchparam=1"], "nosuchparam"),
        (["--auth-token-file", os.path.join(d, "missing-token")], "missing-token"),
        (["--config", fk.write_config({"auth_token_file": os.path.join(d, "gone")})], "gone"),
        (["--config", fk.write_config({"limits": {"max_inflight_requests": 0}})],
         "limits.max_inflight_requests"),
        (["--config", fk.write_config({"file": {"io_threads": 0}})], "file.io_threads"),
    ]
    for args, needle in cases:
        rc, out, err = fk.run_binary(["--check-config"] + args)
        eq(rc, 2, "check-config %r (stderr %r)" % (args, err))
        check(needle in err, "message for %r names %r: %r" % (args, needle, err))
        check("config ok" not in out, "printed config ok for %r" % args)
    # A valid postgresql:// URI passes without a connection (nothing listens on port 1).
    rc, out, err = fk.run_binary(["--check-config", "--store",
                                  "postgresql://fk:pw@127.0.0.1:1/app?sslmode=disable"])
    eq((rc, out), (0, "config ok\n"), "postgres URI (stderr %r)" % err)
    rc, out, err = fk.run_binary(["--check-config"], env={"FENCEKEEPER_AUTH_TOKEN": ""})
    eq(rc, 2, "blank env token")
    rc, out, err = fk.run_binary(["--check-config", "--listen", "0.0.0.0:0"])
    eq(rc, 0, "non-loopback is valid")
    check("WARNING" in err and "0.0.0.0" in err, "warning on stderr: %r" % err)



def test_bad_flag_message_as_documented():
    """docs/configuration.md's two example messages for a bad flag and a bad key, exactly as
    the binary prints them: the message, then the --help hint it says follows."""
    text = open(os.path.join(fk.REPO, "docs", "configuration.md")).read()
    intro = text[text.index("fencekeeper is strict about its configuration"):
                 text.index("## Command-line flags")]
    intro = " ".join(intro.split())
    shown = re.findall(r"\(`(unknown key [^`]*)`, `(--threads: [^`]*)`\)", intro)
    eq(len(shown), 1, "configuration.md's two example messages")
    key_msg, flag_msg = shown[0]
    hint = re.search(r"`(Try [^`]*)`", intro)
    check(hint is not None, "configuration.md shows the --help hint")
    d = fk.tmpdir("bad-flag")
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        json.dump({"limits": {"max_bodyy": 1}}, f)
    for args, msg in ((["--threads", "abc"], flag_msg),
                      (["--config", bad], "config file '%s': %s" % (bad, key_msg))):
        rc, out, err = fk.run_binary(args)
        eq((rc, out, err), (2, "", "fencekeeper: %s\n%s\n" % (msg, hint.group(1))),
           "fencekeeper %s" % " ".join(args))

def test_version():
    rc, out, err = fk.run_binary(["--version"])
    eq(rc, 0, "--version")
    check(re.match(r"^fencekeeper \d+\.\d+\.\d+\n$", out), "version line %r" % out)


def test_non_loopback_warning():
    st = fk.file_store()
    # Listening on every address: no request is sent, the process is only asked to stop.
    p = st.proxy(listen="0.0.0.0:0")
    p.start()
    try:
        text = p.stderr_text()
        check(re.search(r"^fencekeeper: WARNING: listening on 0\.0\.0\.0 without auth", text, re.M),
              "plain warning line on stderr: %r" % text[-1000:])
        line = p.wait_log(lambda o: o.get("level") == "warn" and "non-loopback" in o.get("msg", ""))
        eq(line.get("listen"), "0.0.0.0", "warn log line")
    finally:
        eq(p.stop(), 0, "exit status")
    # With auth, no warning.
    st2 = fk.file_store()
    p2 = st2.proxy(listen="0.0.0.0:0", env={"FENCEKEEPER_AUTH_TOKEN": "secret-x"})
    p2.start()
    try:
        check("WARNING" not in p2.stderr_text(), "warning despite auth")
    finally:
        eq(p2.stop(), 0, "exit status")
    # Loopback: no warning.
    p3 = fk.file_store().start()
    check("WARNING" not in p3.stderr_text(), "warning on loopback")


def test_store_url_not_logged_with_credentials():
    fk.require_service("postgres")
    store = fk.pg_store()
    # A password in the URL must never reach the log.
    url = store.url
    m = re.match(r"^(postgres(?:ql)?://)(.*)$", url)
    check(m, "postgres URL %r" % url)
    p = start(store)
    line = p.wait_log(lambda o: o.get("msg") == "listening")
    shown = line.get("store", "")
    check(shown.startswith(m.group(1)), "store shown as %r" % shown)
    check("@" not in shown and "?" not in shown and "password" not in shown,
          "store URL logged with credentials: %r" % shown)
    # Whatever userinfo or query the URL has never appears anywhere in the log.
    rest = m.group(2)
    secrets = []
    userinfo = rest.split("?")[0].rsplit("@", 1)[0] if "@" in rest.split("?")[0] else ""
    if ":" in userinfo:
        secrets.append(userinfo.split(":", 1)[1])               # the password
    if "?" in rest:
        secrets.append(rest.split("?", 1)[1])
    text = p.stderr_text()
    for secret in secrets:
        check(secret not in text, "%r from the store URL appears in the log" % secret)


def test_framing_errors_carry_request_id(store):
    p = start(store, config={"limits": {"max_body_bytes": 100, "max_header_bytes": 2048}})
    with p.raw() as rc:
        r = rc.request("PUT", "/v1/resources/big", headers={"Fencing-Token": "1",
                                                             "X-Request-Id": "too-big"},
                       body=b"x" * 200)
        expect_error(r, 413, "body_too_large")
        eq(r.header("X-Request-Id"), "too-big", "413 X-Request-Id")
    with p.raw() as rc:
        r = rc.request("GET", "/healthz", headers={"X-Pad": "a" * 4000})
        expect_error(r, 431, "headers_too_large")
        check(r.header("X-Request-Id"), "431 has an X-Request-Id")
    with p.raw() as rc:
        r = rc.request("PUT", "/v1/resources/k", headers={"Fencing-Token": "1", "X-Request-Id": "te-cl",
                                                          "Transfer-Encoding": "chunked",
                                                          "Content-Length": "3"}, body=b"")
        expect_error(r, 400, "invalid_request")
        eq(r.header("X-Request-Id"), "te-cl", "400 framing X-Request-Id")
    # Each was counted after its response was sent, on its own connection: poll.
    # (Beast's parser refuses Content-Length with Transfer-Encoding while reading the
    # head, before routing: route "not_found".)
    wait_metric(p, S("fencekeeper_requests_total", route="resource", code="413"), 1)
    wait_metric(p, S("fencekeeper_requests_total", route="not_found", code="431"), 1)
    wait_metric(p, S("fencekeeper_requests_total", route="not_found", code="400"), 1)



# ---------------------------------------------------------------------------
# Named SQL operations: hostile bodies and database errors (Postgres only)
# ---------------------------------------------------------------------------

def pg_with_user_schema(sql):
    """A Postgres store and a fresh schema for the user's own tables, created by `sql`
    (with {s} standing for the quoted schema name). Returns (store, quoted schema)."""
    store = fk.pg_store()
    if store is None:
        raise fk.Skip("needs FK_TEST_PG_URL")
    name = "u_" + fk.rand_name(10)
    fk._pg_schemas.append(name)
    quoted = '"%s"' % name
    fk.psql(("CREATE SCHEMA %s; " % quoted) + sql.format(s=quoted))
    return store, quoted


def call_op(client, name, body, token=1, lock="ops/lock"):
    """POST /v1/operations/NAME with `body` sent exactly as given (str or bytes)."""
    return client.request("POST", "/v1/operations/" + name, body=body,
                          headers={"Fencing-Token": str(token), "Fencing-Lock": lock,
                                   "Content-Type": "application/json"})


def test_operation_numbers_reach_postgres_as_written():
    store, s = pg_with_user_schema(
        "CREATE TABLE {s}.v (id serial PRIMARY KEY, n numeric, b bigint, f float8, t text);")
    ops = {col: {"sql": "INSERT INTO %s.v (%s) VALUES ($1) RETURNING %s::text AS v" % (s, col, col)}
           for col in ("n", "b", "f", "t")}
    p = start(store, config={"operations": ops})
    token = [0]

    def put(col, number):
        token[0] += 1
        with p.client() as c:
            return call_op(c, col, '{"params": [%s]}' % number, token=token[0])

    def stored(col, number):
        r = put(col, number)
        expect_status(r, 200, "%s into %s" % (number, col))
        return r.json()["rows"][0]["v"]

    # numeric: every digit, whatever a double would have kept.
    eq(stored("n", "123456789012345678901234567890"), "123456789012345678901234567890", "numeric")
    eq(stored("n", "0.30000000000000000001"), "0.30000000000000000001", "numeric")
    eq(stored("n", "-9223372036854775809"), "-9223372036854775809", "numeric")
    tiny = stored("n", "1e-400")
    eq(tiny, "0." + "0" * 399 + "1", "1e-400 into numeric")
    # bigint: the exact limits; beyond them the database refuses, nothing is rounded in.
    eq(stored("b", "9223372036854775807"), "9223372036854775807", "bigint max")
    eq(stored("b", "-9223372036854775808"), "-9223372036854775808", "bigint min")
    for n in ("9223372036854775808", "123456789012345678901234567890", "1.5"):
        r = put("b", n)
        body = expect_error(r, 422, "operation_failed", "%s into bigint" % n)
        check(body.get("sqlstate") in ("22003", "22P02"), "bigint refusal: %r" % body)
    # float8: the server's cast decides; a value it cannot hold is refused, not made 0.
    eq(float(stored("f", "0.1")), 0.1, "float8 0.1")
    eq(float(stored("f", "1.7976931348623157e308")), 1.7976931348623157e308, "float8 max")
    r = put("f", "1e-400")
    eq(expect_error(r, 422, "operation_failed", "1e-400 into float8").get("sqlstate"), "22003",
       "float8 underflow sqlstate")
    # text: the number's own spelling.
    for n in ("18446744073709551616", "1E+5", "-0", "1.10", "0.30000000000000000001",
              "123456789012345678901234567890"):
        eq(stored("t", n), n, "%s into text" % n)
    # Beyond a double's range: 400 naming the fix, nothing written.
    rows_before = fk.psql("SELECT count(*) FROM %s.v" % s).strip()
    r = put("n", "1e400")
    check("string" in expect_error(r, 400, "invalid_request", "1e400")["message"],
          "1e400: the message says to send it as a string")
    eq(stored("n", '"1e400"'), "1" + "0" * 400, "1e400 as a string into numeric")
    eq(fk.psql("SELECT count(*) FROM %s.v" % s).strip(), str(int(rows_before) + 1),
       "only the string form wrote a row")


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise CheckFailed("no VmHWM for pid %d" % pid)


def test_operation_body_with_far_too_many_params():
    store, s = pg_with_user_schema("CREATE TABLE {s}.t (v text);")
    p = start(store, config={"operations": {"one": {"sql": "SELECT $1::text AS v"}}})
    asan = fk.under_asan(p.pid)  # RSS then measures the sanitizer (skip_under_asan)
    with p.client() as c:
        # The statement is prepared (its parameter count known) once this succeeds.
        r = call_op(c, "one", '{"params": ["warm"]}')
        expect_status(r, 200, "warm-up")
        eq(r.json()["rows"], [{"v": "warm"}], "warm-up rows")
    # 4M parameters, 8,000,013 bytes (under the default 8 MiB body limit), for a statement
    # that takes one.
    body = b'{"params":[' + b",".join([b"1"] * 4000000) + b"]}"
    before = vm_hwm_kib(p.pid)
    with p.client() as c:
        r = call_op(c, "one", body, token=2)
        eq(expect_error(r, 400, "invalid_request", "4M params")["message"],
           "operation 'one' takes 1 parameter, got more than 1", "message")
    growth_mib = (vm_hwm_kib(p.pid) - before) / 1024.0
    print("peak RSS growth for one 8 MiB body: %.1f MiB%s"
          % (growth_mib, " (AddressSanitizer: not checked)" if asan else ""))
    # The body is held while it is read (8 MiB, plus Beast's read buffer and the string
    # growing into it: at most about 3x the body), and parsing stops at the second
    # parameter; measured: about 8 MiB. 64 MiB leaves more than twice the worst case; a
    # parse of all 4M parameters into a JSON tree raised the peak by 300-400 MiB.
    check(asan or growth_mib < 64, "peak RSS grew by %.1f MiB for one 8 MiB body" % growth_mib)

    # Three at once, while /healthz is asked: each gets its 400, the probe keeps answering.
    def big(i):
        with p.client() as c:
            return call_op(c, "one", body, token=3 + i).status

    done = threading.Event()
    probes = []

    def probe():
        with p.client(timeout=30) as c:
            while True:
                probes.append(c.healthz().status)
                if done.is_set():
                    break

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    try:
        eq(fk.parallel(big, 3), [400, 400, 400], "three large bodies")
    finally:
        done.set()
        t.join(30)
    check(probes and set(probes) == {200}, "/healthz during the large bodies: %r" % probes[:10])
    with p.client() as c:
        expect_status(c.healthz(), 200, "/healthz after")
        expect_status(call_op(c, "one", '{"params": ["x"]}', token=9), 200, "a good call after")
        eq(c.fence("ops/lock").json()["token"], 9, "refused bodies never moved the fence")
    # Large bodies were parsed on the parse thread; SIGTERM joins it and exits cleanly.
    eq(p.stop(), 0, "exit status after SIGTERM")


def test_operation_errors_stay_in_the_log():
    secret = "s3cret-" + fk.rand_name(8)
    store, s = pg_with_user_schema(
        "CREATE TABLE {s}.secrets (v text); INSERT INTO {s}.secrets VALUES ('%s');"
        "CREATE TABLE {s}.accounts (id int CONSTRAINT accounts_private_pkey PRIMARY KEY);"
        "INSERT INTO {s}.accounts VALUES (1);" % secret)
    leak = "SELECT v::int AS n FROM %s.secrets" % s
    dup = "INSERT INTO %s.accounts VALUES ($1)" % s
    broken = "SELECT hidden_column FROM %s.hidden_table_xyz" % s
    ops = {"leak": {"sql": leak}, "dup": {"sql": dup}, "broken": {"sql": broken},
           "leak_exposed": {"sql": leak, "expose_errors": True},
           "broken_exposed": {"sql": broken, "expose_errors": True}}
    p = start(store, config={"operations": ops})
    with p.client() as c:
        # A value from another table, in the cast error.
        r = call_op(c, "leak", '{"params": []}', token=1)
        body = expect_error(r, 422, "operation_failed", "leak")
        eq(body.get("sqlstate"), "22P02", "leak sqlstate")
        check(secret not in r.text, "the reply quotes the other table's value: %s" % r.text)
        # Constraint and table names, in a unique violation.
        r = call_op(c, "dup", '{"params": [1]}', token=2)
        eq(expect_error(r, 422, "operation_failed", "dup").get("sqlstate"), "23505", "dup sqlstate")
        for word in ("accounts_private_pkey", "accounts", "(id)"):
            check(word not in r.text, "the reply names %r: %s" % (word, r.text))
        # A statement that does not prepare: no SQL fragment, table or column name.
        r = call_op(c, "broken", '{"params": []}', token=3)
        eq(expect_error(r, 422, "operation_failed", "broken").get("sqlstate"), "42P01",
           "broken sqlstate")
        for word in ("hidden_table_xyz", "hidden_column", s.strip('"')):
            check(word not in r.text, "the reply names %r: %s" % (word, r.text))
        # Where the config opts in, the database's message is returned.
        r = call_op(c, "leak_exposed", '{"params": []}', token=4)
        expect_error(r, 422, "operation_failed", "leak_exposed")
        check(secret in r.json()["message"], "exposed: %s" % r.text)
        r = call_op(c, "broken_exposed", '{"params": []}', token=5)
        expect_error(r, 422, "operation_failed", "broken_exposed")
        check("hidden_table_xyz" in r.json()["message"], "exposed: %s" % r.text)
        expect_error(c.fence("ops/lock"), 404, "not_found", "failed statements set no fence")
    # The full text is in the server's log, with the request's id.
    line = p.wait_log(lambda o: o.get("msg") == "operation error" and o.get("operation") == "leak")
    check(secret in line.get("detail", ""), "the log has the database's message: %r" % line)
    eq(line.get("sqlstate"), "22P02", "logged sqlstate")
    check(line.get("request_id"), "logged request_id")
    line = p.wait_log(lambda o: o.get("msg") == "operation error" and o.get("operation") == "dup")
    check("accounts_private_pkey" in line.get("detail", "") and "(id)=(1)" in line.get("detail", ""),
          "the log has the message and its DETAIL: %r" % line)


def test_operation_body_duplicate_keys():
    store, s = pg_with_user_schema("")
    p = start(store, config={"operations": {"echo": {"sql": "SELECT $1::text AS v"}}})
    with p.client() as c:
        for body in ('{"params":[1],"params":["x"]}', '{"params":[{"a":1,"a":2}]}'):
            r = call_op(c, "echo", body, token=1)
            msg = expect_error(r, 400, "invalid_request", body)["message"]
            check("duplicate key" in msg, "%s: %s" % (body, msg))
        expect_error(c.fence("ops/lock"), 404, "not_found", "nothing ran, no fence")
        r = call_op(c, "echo", '{"params":[{"a":1,"b":{"a":2}}]}', token=1)
        expect_status(r, 200, "the same key in different objects")
        eq(r.json()["rows"], [{"v": '{"a":1,"b":{"a":2}}'}], "the object as written")
        # Operations need Fencing-Lock (README's API table).
        r = c.request("POST", "/v1/operations/echo", body='{"params":["x"]}',
                      headers={"Fencing-Token": "5"})
        check("Fencing-Lock" in expect_error(r, 400, "invalid_request", "no Fencing-Lock")["message"],
              "the message names Fencing-Lock")


def test_operation_below_a_fence_floor():
    """A named operation is checked against the effective fence (docs/api.md#fence-floors):
    below a floor it never runs, on a lock fenced before and on one never fenced; at the
    floor it runs and sets the lock's own fence."""
    store, s = pg_with_user_schema("CREATE TABLE {s}.log (lock text, token bigint);")
    p = start(store, config={"operations": {
        "note": {"sql": "INSERT INTO %s.log VALUES ($1, $2) RETURNING token" % s}}})
    with p.client() as c:
        expect_status(call_op(c, "note", '{"params":["ops/fenced", 5]}', token=5, lock="ops/fenced"), 200)
        r = c.request("PUT", "/v1/floors?prefix=ops%2F", headers={"Fencing-Token": "50"})
        expect_status(r, 200, "PUT floor")
        # The second refusal on ops/fenced may come from the fence cache, which keeps the
        # effective fence but not the floor's name (docs/api.md#fence-floors).
        for lock, token, named in (("ops/fenced", 5, True), ("ops/fenced", 49, False), ("ops/never", 1, True)):
            b = expect_error(call_op(c, "note", '{"params":["%s", %d]}' % (lock, token), token=token, lock=lock),
                             409, "stale_token", "operation under %s with %d" % (lock, token))
            eq((b.get("lock"), b.get("token"), b.get("current_token")), (lock, token, 50),
               "409 body of an operation below the floor")
            if named or "floor" in b:
                eq(b.get("floor"), "ops/", "the floor named in the 409")
        eq(fk.psql("SELECT count(*) FROM %s.log" % s).strip(), "1", "no operation ran below the floor")
        r = call_op(c, "note", '{"params":["ops/never", 50]}', token=50, lock="ops/never")
        expect_status(r, 200, "operation at the floor")
        eq(r.json()["token"], 50, "token of the operation at the floor")
        f = c.fence("ops/never").json()
        eq((f.get("token"), f.get("floor")), (50, None), "the operation set the lock's own fence")


def test_credit_example_same_in_readme_and_api():
    """The README's `credit` call and docs/api.md's are the same text, byte for byte."""
    readme = fk.doc_block("README.md", "credit-example")
    api = fk.doc_block("docs/api.md", "credit-example")
    eq([lang for lang, _ in readme], ["json", "console"], "the README's credit blocks")
    eq([lang for lang, _ in api], ["console"], "docs/api.md's credit block")
    eq(readme[1][1], api[0][1], "README's credit example against docs/api.md's")


def test_pg_credit_example_from_the_docs():
    """The `credit` example of the README and docs/api.md, run as written on Postgres: the
    README's config (its store is the test's), an account 7 holding 1000, and each
    console block's output byte for byte."""
    url = fk.require_service("postgres")
    curl = fk.require_tool("curl")
    import urllib.parse
    readme = fk.doc_block("README.md", "credit-example")
    api = fk.doc_block("docs/api.md", "credit-example")
    config = json.loads(readme[0][1])
    config.pop("store")   # flags override the file: the store is the test's
    db = "fk_credit_" + fk.rand_name(8)
    fk.psql("CREATE DATABASE %s" % db)
    try:
        db_url = urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path="/" + db))
        fk.psql("CREATE TABLE accounts (id integer PRIMARY KEY, balance integer NOT NULL)",
                url=db_url)
        store = fk.Store("postgres", db_url, config={"postgres": {"schema": "fencekeeper"}})
        p = start(store, config=config)
        try:
            for where, text in (("README", readme[1][1]), ("docs/api.md", api[0][1])):
                fk.psql("DELETE FROM accounts; INSERT INTO accounts VALUES (7, 1000)", url=db_url)
                fk.run_console_block(p, text, curl, exact=True)
                eq(fk.psql("SELECT balance FROM accounts WHERE id = 7", url=db_url).strip(),
                   "1100", "the balance after %s's example" % where)
        finally:
            p.stop()
    finally:
        fk.psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)

if __name__ == "__main__":
    fk.main(globals())
