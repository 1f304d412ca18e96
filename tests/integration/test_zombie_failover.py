"""Lock-service failover: tokens go backwards.

A Redis primary holds the lock and the token counter fence:NAME; a replica follows it
(--replicaof, through a TCP relay). Holders take the lock and write through
fencekeeper. Then the replication link goes silent (the relay drops everything, as if
the primary died before it could send its last writes), the primary hands out more
tokens that are written, and is killed (kill -9, no persistence). The replica is
promoted (REPLICAOF NO ONE) with the counter several INCRs behind: the next holders
get tokens below what fencekeeper already accepted.

Checks: every write with a lowered token is rejected with 409 stale_token whose body
names the current fence (safety over liveness), storage is untouched; then the
operator recovers as docs/locks.md says (scripts/locks/redis-raise-fence.sh reads
GET /v1/fences/NAME and raises the counter above it) and writes succeed again; all of
it survives a kill -9 of fencekeeper.
"""
import os
import subprocess
import time

import fk
import zombies

BEFORE, LOST, AFTER = 3, 4, 3


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise fk.CheckFailed("timed out waiting for " + what)
        time.sleep(0.05)


def test_failover(store):
    primary = zombies.RedisServer(args=["--repl-diskless-sync-delay", "0"], name="primary").start()
    relay = zombies.Relay(primary.port)
    replica = zombies.RedisServer(args=["--replicaof", "127.0.0.1", relay.port], name="replica").start()
    proxy = store.start()
    proxy.wait_ready()
    rec = zombies.Recorder()
    lock = "ledger-" + fk.rand_name(6)
    n = [0]
    keys = []

    def cycle(server, who):
        """One holder: lock, token, one write to a fresh key, unlock."""
        n[0] += 1
        key = "%s/entry-%02d" % (lock, n[0])
        keys.append(key)
        owner = zombies.owner_id(who)
        with server.client() as r:
            tok = zombies.acquire(r, lock, owner, 5000)
            fk.check(tok is not None, "lock %s unexpectedly held" % lock)
            value = "%s wrote %s with token %d\n" % (who, key, tok)
            with proxy.client() as c:
                op, resp = zombies.direct_op(rec, who, "put", lock, key, tok, value,
                                             lambda: c.put(key, value, token=tok, lock=lock))
            zombies.release(r, lock, owner)
        return tok, op

    try:
        _wait(lambda: replica.info().get("master_link_status") == "up", 15, "the replica to sync")
        for _ in range(BEFORE):
            tok, op = cycle(primary, "before")
            fk.check(op.result == "ok", "write before the failover: %r %r" % (op, rec.reply(op)))
        _wait(lambda: replica.call("GET", "fence:" + lock) == str(BEFORE).encode(), 10,
              "the replica's counter to reach %d" % BEFORE)
        # The last release follows its INCR; with a fast write in between it can still be
        # in flight here, and a cut now would leave the replica holding the lock.
        _wait(lambda: replica.call("EXISTS", "lock:" + lock) == 0, 10,
              "the replica to see the last release")

        relay.cut()        # from now on the replica hears nothing from the primary
        for _ in range(LOST):
            tok, op = cycle(primary, "lost")
            fk.check(op.result == "ok", "write on the doomed primary: %r %r" % (op, rec.reply(op)))
        fence = tok
        fk.eq(fence, BEFORE + LOST, "last token of the old primary")
        fk.eq(primary.call("GET", "fence:" + lock), str(fence).encode(), "primary's counter")
        time.sleep(0.3)    # were the link up, the replica would have these INCRs by now
        fk.eq(replica.call("GET", "fence:" + lock), str(BEFORE).encode(),
              "replica's counter before the failover (the last INCRs must not have arrived)")
        primary.kill()     # kill -9, no persistence: the last INCRs are gone
        relay.close()
        fk.eq(replica.call("REPLICAOF", "NO", "ONE"), "OK", "promotion")
        fk.eq(replica.call("GET", "fence:" + lock), str(BEFORE).encode(),
              "promoted replica's counter (the lost INCRs must be lost)")
        fk.eq(proxy.fence(lock).json()["token"], fence, "fencekeeper's fence")

        lowered = []
        for _ in range(AFTER):
            tok, op = cycle(replica, "after")
            fk.check(tok < fence, "token %d after failover is not below the fence %d" % (tok, fence))
            body = rec.expect_stale(op, fence=fence)
            lowered.append((tok, body["current_token"]))
        fk.eq(proxy.fence(lock).json()["token"], fence, "fence after the rejected writes")
        print("  old primary issued tokens 1..%d; promoted replica issued %s: all 409, current_token %d"
              % (fence, ", ".join(str(t) for t, _ in lowered), fence))

        # Recovery, the documented way.
        script = os.path.join(zombies.LOCKS, "redis-raise-fence.sh")
        env = dict(os.environ, **zombies.redis_env(replica.port))
        r = subprocess.run([script, lock, "http://%s:%d" % (proxy.host, proxy.port)],
                           capture_output=True, text=True, env=env, timeout=30)
        fk.check(r.returncode == 0, "redis-raise-fence.sh failed (%d): %s %s"
                 % (r.returncode, r.stdout, r.stderr))
        print("  recovery: " + r.stdout.strip())
        counter = int(replica.call("GET", "fence:" + lock))
        fk.check(counter >= fence, "counter %d still below the fence %d" % (counter, fence))
        for _ in range(2):
            tok, op = cycle(replica, "recovered")
            fk.check(tok > fence, "token %d after recovery not above the fence %d" % (tok, fence))
            fk.check(op.result == "ok", "write after recovery: %r %r" % (op, rec.reply(op)))
        # Running the script again never lowers the counter.
        r = subprocess.run([script, lock, "http://%s:%d" % (proxy.host, proxy.port), "0"],
                           capture_output=True, text=True, env=env, timeout=30)
        fk.check(r.returncode == 0 and int(replica.call("GET", "fence:" + lock)) == tok,
                 "second raise changed the counter: %s %s" % (r.stdout, r.stderr))
    finally:
        zombies.cleanup()
    zombies.restart_proxy_hard(proxy)
    keys_state, fences = rec.check(proxy, keys, [lock])
    for op in rec.ops(kind="put"):
        if op.process == "after":
            fk.eq(keys_state[op.key], None, "key %s written with a lowered token" % op.key)
        else:
            fk.eq(keys_state[op.key][0], op.value, "key %s" % op.key)
    fk.eq(fences[lock], tok, "final fence")


if __name__ == "__main__":
    fk.main(globals())
