#!/usr/bin/env python3
"""Linearizability of fencekeeper under concurrency and faults: concurrent clients
(lincheck_workload.py) record every request against real fencekeepers, and the checker
(lincheck.py) decides whether the whole history could have come from one copy of the
fence rule's model, each request taking effect at one instant between its send and its
answer (docs/api.md, "The fence rule", "Durability and retries").

Configurations:
  1. file store, one proxy, no faults;
  2. file store, one proxy, kill -9 (restart on the same store) and SIGSTOP (0.5-3 s);
  3. Postgres, one proxy, kill -9, SIGSTOP and an immediate Postgres restart;
  4. Postgres, two proxies on one database (one schema), no faults;
  5. the same with kill -9 and SIGSTOP of one proxy and an immediate Postgres restart.
One proxy: a 409's current_token must be the fence where the refusal linearizes
(current_token="exact"); two: token < current_token <= fence ("bounded", each proxy
refuses from its own cache of fences).

A run fails when the history is not linearizable, when the checker ran out of time
(neither proof nor refutation), when it has fewer than MIN_DEFINITE ok/stale ops or no
stale refusal (a driver that tests nothing), when a reply is one this load can never earn
(anomalies: 400, 428, lock_mismatch, 500, ...), or when a fault could not be injected.
On a failure the history and its shortest failing prefix are saved (lincheck.save) under
FK_LIN_ARTIFACTS (default /tmp/fk-lincheck-<seed>/, outside the temp dirs fk removes).

Postgres runs need FK_TEST_PG_URL; restarts also FK_TEST_PG_DATA, FK_TEST_PG_BIN and
FK_TEST_PG_RUN_AS (scripts/test.sh sets them); without them they skip (fail under
FK_REQUIRE_SERVICES=1).

Environment:
  FK_SEED               the seed (printed; 0 or unset: a random one)
  FK_LIN_SECONDS        seconds of load per run (default 12; `--long` / FK_LONG=1: 120)
  FK_LIN_ROUNDS         runs per configuration (default 1)
  FK_LIN_CLIENTS        client threads (default 8)
  FK_LIN_CHECK_BUDGET   the checker's time budget per history, seconds (default 60)
  FK_LIN_ARTIFACTS      where failing histories go

    FENCEKEEPER_BIN=$PWD/build/fencekeeper python3 tests/integration/test_linearizability.py [FILTER]
"""

import os
import sys
import time

import fk
import lincheck
import lincheck_workload as lw

LONG = os.environ.get("FK_LONG") == "1" or "--long" in sys.argv
if "--long" in sys.argv:
    sys.argv.remove("--long")
SECONDS = float(os.environ.get("FK_LIN_SECONDS") or (120 if LONG else 12))
ROUNDS = int(os.environ.get("FK_LIN_ROUNDS") or 1)
CLIENTS = int(os.environ.get("FK_LIN_CLIENTS") or 8)
CHECK_BUDGET = float(os.environ.get("FK_LIN_CHECK_BUDGET") or 60)
SEED = lw.seed_from_env()
ARTIFACTS = os.environ.get("FK_LIN_ARTIFACTS") or "/tmp/fk-lincheck-%d" % SEED
MIN_DEFINITE = 200

print("seed %d (FK_SEED=%d replays it), %.0fs per run, %d round(s)" % (SEED, SEED, SECONDS, ROUNDS),
      flush=True)


def fault_counts():
    """kill -9 and SIGSTOP counts for one run: about one of each per 6 s of load."""
    n = max(1, int(SECONDS // 6))
    return n, n, max(1, int(SECONDS // 30))


def save_failure(label, rnd, wl, ops, mode, message):
    """Saves the history and its shortest failing prefix; returns a text naming both."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    base = os.path.join(ARTIFACTS, "%s-round%d" % (label, rnd))
    extra = dict(wl.extra(), label=label, round=rnd, current_token=mode, message=message)
    hist = base + "-history.json"
    lincheck.save(ops, hist, extra=extra)
    out = ["history: %s (%d ops)" % (hist, len(ops))]
    try:
        t = time.monotonic()
        prefix = lincheck.shortest_failing_prefix(ops, current_token=mode, time_budget=CHECK_BUDGET)
        pre = base + "-prefix.json"
        lincheck.save(prefix, pre, extra=extra)
        out.append("shortest failing prefix: %s (%d ops of lock %s, found in %.1fs)"
                   % (pre, len(prefix), prefix[0].lock if prefix else None, time.monotonic() - t))
        if prefix:
            r = lincheck.check(prefix, current_token=mode, time_budget=CHECK_BUDGET)
            out.append("the prefix's check: " + r.message.splitlines()[0])
    except Exception as e:
        out.append("shortest failing prefix: not found (%r)" % (e,))
    return "\n".join(out)


def run_config(label, make_store, nproxies, faults=False, pg_restart=False):
    mode = "exact" if nproxies == 1 else "bounded"
    pg = lw.PgServer.from_env() if pg_restart else None
    for rnd in range(ROUNDS):
        seed = SEED + 1000003 * rnd
        store = make_store()
        config = lw.pg_proxy_config() if store.kind == "postgres" else None
        proxies = [store.start(config=config) for _ in range(nproxies)]
        for p in proxies:
            p.wait_ready()
        kills, stops, pgr = fault_counts()
        f = lw.Faults(kills=kills, stops=stops, pg_restarts=pgr if pg_restart else 0,
                      targets=[0], pg=pg) if faults else None
        wl = lw.Workload(proxies, seed, duration=SECONDS, nthreads=CLIENTS, faults=f)
        t = time.monotonic()
        ops = wl.run()
        t_run = time.monotonic() - t
        print("  %s round %d: run %.1fs; %s" % (label, rnd, t_run, wl.summary().replace("\n", "\n    ")),
              flush=True)
        fk.check(not wl.fault_errors, "faults failed: %s" % "; ".join(wl.fault_errors[:5]))
        fk.check(not wl.anomalies, "%d replies this load can never earn, e.g.:\n  %s"
                 % (len(wl.anomalies), "\n  ".join(wl.anomalies[:10])))
        definite = wl.definite()
        fk.check(definite >= MIN_DEFINITE, "only %d definite (ok/stale) ops: the run tests nothing" % definite)
        fk.check(any(o.outcome == "stale" for o in ops), "no 409 stale_token: the load does not test the fence")
        if faults:
            fk.check(wl.events, "faults were asked for but none happened")
        t = time.monotonic()
        res = lincheck.check(ops, current_token=mode, time_budget=CHECK_BUDGET)
        t_check = time.monotonic() - t
        print("  %s round %d: check (%s) %.2fs: %s" % (label, rnd, mode, t_check, res.message.splitlines()[0]),
              flush=True)
        if res.timed_out:
            where = save_failure(label, rnd, wl, ops, mode, res.message)
            fk.fail("%s round %d (seed %d): the checker ran out of time (%.0fs): neither proven nor "
                    "refuted\n%s" % (label, rnd, seed, CHECK_BUDGET, where))
        if not res.ok:
            where = save_failure(label, rnd, wl, ops, mode, res.message)
            fk.fail("%s round %d (seed %d): not linearizable (%s)\n%s\n%s"
                    % (label, rnd, seed, mode, where, res.message))
        for p in proxies:
            p.kill()


def test_file_one_proxy():
    run_config("file-1", fk.file_store, 1)


def test_file_one_proxy_kill_stop():
    run_config("file-1-faults", fk.file_store, 1, faults=True)


def _pg():
    fk.require_service("postgres")
    return fk.pg_store()


def test_pg_one_proxy_kill_stop_restart():
    run_config("pg-1-faults", _pg, 1, faults=True, pg_restart=True)


def test_pg_two_proxies():
    run_config("pg-2", _pg, 2)


def test_pg_two_proxies_kill_stop_restart():
    run_config("pg-2-faults", _pg, 2, faults=True, pg_restart=True)


if __name__ == "__main__":
    fk.main(globals())
