"""Clock jump: a careful holder that checks its lease on its own clock is fooled by a
clock step, two holders coexist, and the lower token still loses.

Holder A is careful in the Redlock style: it takes the Redis lock (TTL 500 ms), works,
and writes only if less than the TTL has elapsed on its wall clock. A runs under
libfaketime and, while it works, its clock is stepped back 30 s (an NTP step, a VM
restored from a snapshot). The lock expires in Redis; B takes it with a higher token
and writes. A finishes, its check says "still valid", and it writes: 409 stale_token.
A sanity run without the clock step shows the check itself works (A gives up).

Why the clock is jumped on the holder and not on the lock service: libfaketime 0.9.10
(Debian 12) aborts Debian's redis-server at start ("Unexpected recursive calls to
clock_gettime()", an interaction with jemalloc), and etcd, a Go program, does not read
the time through libc. A forward jump on the Redis server (early expiry) has the same
effect as the stall in test_zombie_pause: two holders at once, fenced by the token.
"""
import os
import time

import fk
import zombies

TTL_MS = 500
WORK_MS = 1000    # the sanity holder S: twice its TTL
# A works long enough for B to take the expired lock and finish a durable write (two
# directory fsyncs, a syncfs and the index's WAL fdatasync, or a Postgres commit) meanwhile,
# even on a busy disk: with only WORK_MS, B had 500 ms for that.
A_WORK_MS = 5000
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def _faketime_env(clock_file):
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": clock_file,
            "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def test_clock_jump(store):
    port = int(fk.require_service("redis"))
    fk.require_tool("faketime")
    if not os.path.exists(LIBFAKETIME):
        fk.missing("libfaketime is not installed (%s)" % LIBFAKETIME)
    proxy = store.start()
    proxy.wait_ready()
    rec = zombies.Recorder()
    lock = "clock-" + fk.rand_name(6)
    key = "jobs/%s/result.csv" % lock
    clock = os.path.join(fk.tmpdir("clock"), "faketime")

    def careful(name, key_, work_ms):
        argv = zombies.worker_argv("--mode", "careful", "--name", name, "--lock", lock, "--key", key_,
                                   "--target", zombies.fk_target(proxy), "--redis-port", port,
                                   "--ttl-ms", TTL_MS, "--work-ms", work_ms)
        return zombies.Worker(name, rec, argv, env=_faketime_env(clock))

    try:
        # Sanity: without a clock step the careful check notices the expired lease.
        with open(clock, "w") as f:
            f.write("+0\n")
        s = careful("S", key + ".sanity", WORK_MS)
        chk = s.wait_ev("lease_check", 10)
        fk.check(not chk["valid"], "without a clock step the lease check should fail: %r" % chk)
        s.wait_exit(10)
        fk.check(not rec.ops(worker="S"), "the sanity holder wrote although its lease expired")

        a = careful("A", key, A_WORK_MS)
        a_tok = a.wait_ev("acquired", 10)["token"]
        a.wait_ev("working", 5)
        with open(clock, "w") as f:          # A's clock steps back 30 s
            f.write("-30s\n")
        owner = zombies.owner_id("B")
        deadline = time.monotonic() + 10
        with zombies.RedisClient(port) as r:
            while True:
                b_tok = zombies.acquire(r, lock, owner, 5000)
                if b_tok is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            fk.check(b_tok is not None and b_tok > a_tok, "B's token %r vs A's %d" % (b_tok, a_tok))
            value = "B,%s,token=%d\n" % (key, b_tok)
            with proxy.client() as c:
                b_op, _ = zombies.direct_op(rec, "B", "put", lock, key, b_tok, value,
                                            lambda: c.put(key, value, token=b_tok, lock=lock))
            fk.check(b_op.result == "ok", "B's write: %r %r" % (b_op, rec.reply(b_op)))
            chk = a.wait_ev("lease_check", 10)
            a.wait_exit(10)
            zombies.release(r, lock, owner)
    finally:
        zombies.cleanup()
    fk.check(chk["valid"], "A's clock step did not fool its lease check: %r" % chk)
    fk.check(b_op.complete_t < chk["t"], "B's write should have happened while A believed it held the lock")
    a_put = rec.ops(kind="put", worker="A")
    fk.check(len(a_put) == 1, "A should have written once: %r" % a_put)
    body = rec.expect_stale(a_put[0], fence=b_tok)
    print("  A (token %d) worked %d ms, but its stepped-back clock measured %.0f ms, so it believed "
          "its %d ms lease still valid while B (token %d) held the lock and wrote; A's write: 409, "
          "current_token %d" % (a_tok, A_WORK_MS, chk["elapsed_ms"], TTL_MS, b_tok, body["current_token"]))
    zombies.restart_proxy_hard(proxy)
    keys_state, fences = rec.check(proxy, [key], [lock])
    fk.eq(keys_state[key][0], b_op.value, "stored value (B's)")


if __name__ == "__main__":
    fk.main(globals())
