"""Postgres store: requests that arrive while the pool is connecting (docs/postgres.md, "Running").

fencekeeper prints `listening on` before its pool has a connection. A request that
arrives while a connection attempt is in progress waits for it and is then served; only
a failed attempt turns into 503 (docs/postgres.md "Running"). The same holds when every
connection was lost and the pool is reconnecting.

  - writes fired the instant `listening on` is printed, over ten restarts (with and
    without group commit): every one is 2xx;
  - every fencekeeper backend terminated (pg_terminate_backend), then writes at once,
    five times: every one is 2xx.

Needs FK_TEST_PG_URL (exit 77 = skipped without it, unless FK_REQUIRE_SERVICES=1) and psql.
"""

import threading
import time
import urllib.parse

import fk
from fk import check, eq

PG_URL = fk.require_service("postgres")

POOL_SIZE = 4
WRITERS = 6


def fire_writes(go, proxy_of, prefix, token):
    """Starts WRITERS threads that wait for `go`, then each send one write on a new
    connection: even ones PUT a resource, odd ones raise a fence. Returns a function that
    joins them and returns [(what, status, body)]."""
    results = []
    mu = threading.Lock()

    def writer(i):
        go.wait()
        p = proxy_of()
        name = "%s/%d" % (prefix, i)
        try:
            with p.client(timeout=30) as c:
                if i % 2 == 0:
                    r = c.put(name, b"body %d" % i, token=token)
                    what = "PUT resource " + name
                else:
                    r = c.put_fence(name, token)
                    what = "PUT fence " + name
            out = (what, r.status, r.body[:200])
        except Exception as e:
            out = (name, None, repr(e))
        with mu:
            results.append(out)

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(WRITERS)]
    for t in threads:
        t.start()

    def join():
        for t in threads:
            t.join(60)
        check(not any(t.is_alive() for t in threads), "a writer did not finish")
        return results

    return join


def not_2xx(results):
    return [r for r in results if r[1] is None or not 200 <= r[1] < 300]


def test_writes_the_instant_listening_appears():
    store = fk.pg_store()
    failures = []
    for round_ in range(10):
        go = threading.Event()
        holder = []
        # Odd rounds without group commit: those writes take the pool's acquire path.
        config = {"postgres": {"pool_size": POOL_SIZE, "batch_max": 64 if round_ % 2 == 0 else 1}}
        p = store.proxy(config=config, on_listening=lambda proxy: go.set())
        holder.append(p)
        join = fire_writes(go, lambda: holder[0], "startup/%d" % round_, 1)
        p.start()
        results = join()
        eq(len(results), WRITERS, "round %d: answers" % round_)
        bad = not_2xx(results)
        if bad:
            failures.append((round_, bad))
        p.stop()
    check(not failures, "writes sent the instant `listening on` appeared were not all 2xx "
          "(%d of 10 restarts): %r" % (len(failures), failures))


def _with_application_name(url, name):
    """The store URL with its own application_name, so that only this test's backends are
    terminated (the URL's value wins over fencekeeper's fallback_application_name)."""
    sep = "&" if urllib.parse.urlsplit(url).query else "?"
    return url + sep + "application_name=" + name


def _backends(app):
    out = fk.psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s'" % app)
    return int(out.strip() or 0)


def _wait_backends(app, n, timeout=20.0):
    deadline = time.monotonic() + timeout
    while _backends(app) < n:
        check(time.monotonic() < deadline, "the pool did not reach %d connections within %.0fs"
              % (n, timeout))
        time.sleep(0.05)


def test_writes_at_once_after_every_backend_is_terminated():
    app = "fk_" + fk.rand_name(10)
    base = fk.pg_store()
    store = fk.Store("postgres", _with_application_name(base.url, app), config=base.config,
                     schema=base.schema)
    p = store.start(config={"postgres": {"pool_size": POOL_SIZE}})
    p.wait_ready()
    _wait_backends(app, POOL_SIZE)
    failures = []
    for round_ in range(5):
        go = threading.Event()
        join = fire_writes(go, lambda: p, "term/%d" % round_, 1)
        # The second argument waits (up to 5 s) until each backend has exited, so that the
        # pool's idle connections are all dead when the writes arrive.
        killed = int(fk.psql("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                             "WHERE application_name = '%s'" % app).strip())
        eq(killed, POOL_SIZE, "round %d: backends terminated" % round_)
        go.set()
        results = join()
        bad = not_2xx(results)
        if bad:
            failures.append((round_, bad))
        _wait_backends(app, POOL_SIZE)
    check(not failures, "writes sent right after every backend was terminated were not all 2xx "
          "(%d of 5 rounds): %r" % (len(failures), failures))
    eq(p.client().readyz().status, 200, "/readyz after the terminations")


if __name__ == "__main__":
    fk.main(globals())
