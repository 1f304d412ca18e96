"""kill -9 under load, on both stores (docs/reliability.md).

Each cycle: 8 writer threads send puts, deletes and fence advances with random tokens
(a quarter of them below the fence on purpose) on 3 locks guarding 6 keys; after a random
0.05-1.0 s fencekeeper is kill -9'ed while requests are in flight; it is restarted on the
same store, and the whole operation history so far is checked against what the
restarted process serves (fk.History.check):
  - no acknowledged write lost (each key holds its last acknowledged write, or a write
    that was in flight at a kill and may have been applied after it);
  - no write acknowledged with a token below a fence already acknowledged for its lock;
  - no rejected (409) write present, every fence at least its highest acknowledged token
    and never above every non-rejected token;
  - file store: no temp file left, bodies on disk equal the bodies served.
Writes in flight at a kill are "unknown" and may go either way.

Cycles: 30 per store by default; `--long` or FK_LONG=1: 300; FK_KILL9_CYCLES=N overrides.
"""

import contextlib
import os
import random
import sys
import time

import fk
import robust

LONG = os.environ.get("FK_LONG") == "1" or "--long" in sys.argv
if "--long" in sys.argv:
    sys.argv.remove("--long")
CYCLES = int(os.environ.get("FK_KILL9_CYCLES") or (300 if LONG else 30))
RNG = random.Random(int(os.environ.get("FK_SEED", "0")) or None)


def test_kill9_cycles(store):
    ks = robust.Keyspace("k9", nlocks=3, keys_per_lock=2)
    tokens = robust.Tokens(ks.locks)
    history = fk.History()
    p = store.start(config={"postgres": {"statement_timeout_ms": 3000, "connect_timeout_ms": 2000}}
                    if store.kind == "postgres" else None)
    p.wait_ready()
    cur = [p]
    killed_mid_flight = 0
    t0 = time.monotonic()
    for cycle in range(CYCLES):
        n_before = len(history.ops)
        load = robust.Load(lambda: cur[0], history, ks, tokens, nthreads=8,
                           sizes=(1, 16 * 1024), timeout=15, tag="c%d-" % cycle)
        load.start()
        time.sleep(RNG.uniform(0.05, 1.0))
        p.kill()
        load.stop()
        unknown_now = sum(1 for o in history.ops[n_before:] if o.result == "unknown")
        killed_mid_flight += 1 if unknown_now else 0
        p.start()
        p.wait_ready()
        try:
            robust.verify(history, p, ks, root=store.root)
        except fk.CheckFailed as e:
            raise fk.CheckFailed("after kill -9 #%d: %s" % (cycle + 1, e))
    _, fences = robust.verify(history, p, ks, root=store.root)
    robust.check_still_fencing(p, ks, fences)
    s = history.summary()
    acks = len(robust.acked(history))
    stale = sum(1 for o in history.ops if o.result == "fail" and "409" in str(o.info))
    print("  %s: %d kill -9 cycles in %.1fs, %d ops %s, %d acked, %d rejected stale, "
          "%d kills with requests in flight"
          % (store.kind, CYCLES, time.monotonic() - t0, len(history.ops), s, acks, stale, killed_mid_flight))
    fk.check(acks >= CYCLES, "too few acknowledged writes (%d) to mean anything" % acks)
    fk.check(stale > 0, "no stale write was rejected: the load does not test the fence")
    fk.check(killed_mid_flight >= CYCLES // 2,
             "only %d of %d kills hit requests in flight" % (killed_mid_flight, CYCLES))


def test_checker_catches_a_lost_write():
    """The check above can fail: lose the index's WAL after a kill (as a store that
    acknowledged before the WAL's fsync would after a power loss: the commits since the
    last checkpoint) and it must object."""
    st = fk.file_store()
    ks = robust.Keyspace("lost", nlocks=2, keys_per_lock=1)
    history = fk.History()
    p = st.start()
    p.wait_ready()
    # A clean stop first folds the new index's schema into index.db: with it only in the
    # lost WAL the store would refuse to start at all (a new index beside bodies), and
    # this test is about the history checker.
    p.stop()
    p.start()
    p.wait_ready()
    load = robust.Load(lambda: p, history, ks, robust.Tokens(ks.locks), nthreads=4, sizes=(1, 512))
    load.start()
    # Kill once something is acknowledged: a fixed sleep can end before the first batch's
    # syncfs does on a busy disk, and then there is nothing for the checker to miss.
    deadline = time.monotonic() + 30
    while not robust.acked(history) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    p.kill()
    load.stop()
    fk.check(robust.acked(history), "nothing acknowledged")
    wal = os.path.join(st.root, "index.db-wal")
    fk.check(os.path.getsize(wal) > 32, "no commit in the WAL to lose")
    os.unlink(wal)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(st.root, "index.db-shm"))   # its index of the lost WAL
    p.start()
    p.wait_ready()
    try:
        robust.verify(history, p, ks, root=st.root)
    except fk.CheckFailed as e:
        print("  caught as expected: %s" % str(e).splitlines()[1].strip()[:150])
        return
    fk.fail("the history checker accepted a store that lost its WAL")


if __name__ == "__main__":
    fk.main(globals())
