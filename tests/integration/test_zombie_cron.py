"""The cron race: three instances of a nightly job try, every round, to produce that
round's report under one Redis lock. Each round one random instance (the victim) is
frozen with SIGSTOP mid-work, past its lock's TTL; another instance takes the lock and
writes the report; then the victim wakes up and writes its now-stale report.

  test_cron_race:    through fencekeeper. Every stale write is rejected (409
                     stale_token), every round ends with exactly one report, written
                     by a current holder, and it survives a kill -9 of fencekeeper.
  test_cron_control: the very same race writing straight into storage (files in a
                     directory / an UPSERT into a Postgres table). The stale holder's
                     report overwrites the good one in every round: without the fence,
                     the lock alone does not protect the data. A round without that
                     corruption means the scenario did not produce a zombie there, and
                     test_cron_race would prove nothing about it, so the control fails.

Env: FK_ZOMBIE_ROUNDS (default 20), FK_ZOMBIE_SEED (default: random, printed).
"""
import os
import random
import sys

import fk
import zombies

ROUNDS = int(os.environ.get("FK_ZOMBIE_ROUNDS", "20"))
TTL_MS = 400
WORK_MS = 60


def _seed():
    s = int(os.environ.get("FK_ZOMBIE_SEED") or random.randrange(1 << 30))
    print("  seed %d (FK_ZOMBIE_SEED to replay the victim choices)" % s)
    return s


def test_cron_race(store):
    port = int(fk.require_service("redis"))
    fk.check(ROUNDS >= 1, "FK_ZOMBIE_ROUNDS must be >= 1")
    proxy = store.start()
    proxy.wait_ready()
    rec = zombies.Recorder()
    lock = "cron-" + fk.rand_name(6)
    try:
        rounds = zombies.cron_race(store, rec, rounds=ROUNDS, lock=lock, redis_port=port,
                                   proxy=proxy, ttl_ms=TTL_MS, work_ms=WORK_MS, seed=_seed())
    finally:
        zombies.cleanup()
    # Recovery: kill -9 fencekeeper and start it again on the same store; everything
    # acknowledged must be there, nothing rejected may be.
    zombies.restart_proxy_hard(proxy)
    keys = [r["key"] for r in rounds]
    keys_state, fences = rec.check(proxy, keys, [lock])
    rejected = 0
    for r in rounds:
        key = r["key"]
        acked = rec.ops(kind="put", key=key, result="ok")
        fk.check(len(acked) == 1, "round %d: want exactly one acknowledged report, got %r" % (r["round"], acked))
        good = acked[0]
        fk.check(good.process != r["victim"], "round %d: the frozen victim's report was accepted: %r"
                 % (r["round"], good))
        fk.check(keys_state[key] is not None and keys_state[key][0] == good.value,
                 "round %d: stored report %r is not the acknowledged one %r"
                 % (r["round"], keys_state[key], good))
        stale = rec.ops(kind="put", key=key, worker=r["victim"])
        fk.check(len(stale) == 1, "round %d: victim %s should have written once: %r"
                 % (r["round"], r["victim"], stale))
        body = rec.expect_stale(stale[0])
        fk.check(body["current_token"] >= good.token > stale[0].token,
                 "round %d: 409 current_token %r should be >= the report's token %d > the victim's %d"
                 % (r["round"], body["current_token"], good.token, stale[0].token))
        rejected += 1
    # No rejected write anywhere is in storage (the History check covered the keys);
    # the fence is the highest token any holder fenced with.
    fk.check(fences[lock] == max(o.token for o in rec.ops(result="ok")), "fence %r" % fences[lock])
    print("  %d rounds, %d stale reports rejected with 409, %d ops: %s"
          % (len(rounds), rejected, len(rec.history.ops), rec.history.summary()))


def test_cron_control(store):
    port = int(fk.require_service("redis"))
    rec = zombies.Recorder()
    lock = "control-" + fk.rand_name(6)
    try:
        rounds = zombies.cron_race(store, rec, rounds=ROUNDS, lock=lock, redis_port=port,
                                   proxy=None, ttl_ms=TTL_MS, work_ms=WORK_MS, seed=_seed())
    finally:
        zombies.cleanup()
    target = zombies.ControlTarget(store)
    corrupted = []
    for r in rounds:
        key = r["key"]
        final = target.read(key)
        fk.check(final is not None, "round %d: no report at all" % r["round"])
        puts = rec.ops(kind="put", key=key)
        writers = [o for o in puts if o.value.rstrip(b"\n") == final.rstrip(b"\n")]
        fk.check(len(writers) == 1, "round %d: report %r not written by exactly one op" % (r["round"], final))
        w = writers[0]
        newer = [o for o in puts if o.result == "ok" and o.token > w.token]
        # The victim checked for the report before it was frozen and writes unconditionally
        # once woken, after another instance's write completed: its stale report must win.
        fk.check(r["winner"] is not None and w.process == r["victim"] and newer,
                 "round %d: the report is %s's (token %d), not the frozen victim %s's over %s's "
                 "newer one: the race produced no zombie write"
                 % (r["round"], w.process, w.token, r["victim"], r["winner"]))
        corrupted.append((r["round"], w.process, w.token, newer[0].process, newer[0].token))
    for c in corrupted[:3]:
        print("  round %d: stale %s (token %d) overwrote %s's report (token %d)" % c)
    print("  control run without fencekeeper: all %d rounds ended with a stale holder's report"
          % len(rounds))


if __name__ == "__main__":
    fk.main(globals())
