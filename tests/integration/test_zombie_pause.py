"""Pause: a lock holder is frozen (SIGSTOP, like a long GC pause or a VM migration) past
its lock's TTL while it works. A new holder takes the lock, gets a higher token and
writes. The old holder is woken (SIGCONT), carries on as if nothing happened and
writes: fencekeeper answers 409 stale_token naming the current fence, and storage keeps
the new holder's data, also after a kill -9 of fencekeeper.

Both holders are real processes under the lock wrappers users are given:
scripts/locks/redis-lock.sh (Redis SET NX PX + INCR) and scripts/locks/etcd-lock.sh
(etcdctl lock, token = ETCD_LOCK_REV). With etcd the whole process group is frozen,
etcdctl included, so the session lease stops being renewed and expires.
"""
import time

import fk
import zombies

REDIS_TTL_MS = 500
ETCD_TTL_S = 2          # etcd's minimum lease TTL is about 2 s


def _pause(store, service):
    if service == "redis":
        port = int(fk.require_service("redis"))
        env = zombies.redis_env(port)
        ttl_s = REDIS_TTL_MS / 1000.0
    else:
        env = zombies.etcd_env()
        env["ETCD_LOCK_TTL"] = str(ETCD_TTL_S)
        ttl_s = ETCD_TTL_S
    proxy = store.start()
    proxy.wait_ready()
    rec = zombies.Recorder()
    lock = "pause-%s-%s" % (service, fk.rand_name(6))
    key = "jobs/%s/result.csv" % lock

    def wrapper():
        if service == "redis":
            return zombies.wrapper_redis(lock, REDIS_TTL_MS)
        return zombies.wrapper_etcd(lock)

    def worker(name, work_ms, extra_env=None, hold=()):
        e = dict(env)
        e.update(extra_env or {})
        argv = zombies.worker_argv("--name", name, "--lock", lock, "--key", key,
                                   "--target", zombies.fk_target(proxy), "--work-ms", work_ms,
                                   *hold)
        return zombies.Worker(name, rec, argv, wrapper=wrapper(), env=e)

    try:
        a_spawned = time.monotonic()     # A's lease cannot have started before this
        # A holds after "working" until it is frozen, so the freeze lands mid-job
        # however late this process gets to send it.
        go = zombies.Worker.hold()
        a = worker("A", 300, hold=("--go-file", go))
        a_tok = a.wait_ev("acquired", 15)["token"]
        a.wait_ev("working", 5)
        a.pause()
        frozen_at = time.monotonic()
        zombies.Worker.go(go)
        # B waits for the lock (redis-lock.sh retries; etcdctl lock blocks) and only gets
        # it when A's lease has run out while A is frozen.
        b = worker("B", 0, {"LOCK_WAIT_MS": "20000"})
        b_acq = b.wait_ev("acquired", 10 + 3 * ttl_s)
        b_tok = b_acq["token"]
        fk.check(b_tok > a_tok, "B's token %d should be above A's %d" % (b_tok, a_tok))
        fk.check(b_acq["t"] - a_spawned >= ttl_s * 0.95,
                 "B got the lock %.2fs after A was started, before A's TTL (%.1fs) could run out"
                 % (b_acq["t"] - a_spawned, ttl_s))
        b.wait_ev("complete", 10)
        b.wait_exit(15)
        b_put = rec.ops(kind="put", worker="B")
        fk.check(len(b_put) == 1 and b_put[0].result == "ok", "B's write: %r %r"
                 % (b_put, b_put and rec.reply(b_put[0])))
        print("  A took %s token %d, was frozen %.2fs; B took token %d and wrote"
              % (service, a_tok, time.monotonic() - frozen_at, b_tok))
        a.resume()
        a.wait_ev("complete", 15)
        a.wait_exit(15)
    finally:
        zombies.cleanup()
    a_put = rec.ops(kind="put", worker="A")
    fk.check(len(a_put) == 1, "A should have tried exactly one write: %r" % a_put)
    body = rec.expect_stale(a_put[0], fence=b_tok)
    print("  A woke and wrote with token %d: 409 %s, current_token %d"
          % (a_tok, body["error"], body["current_token"]))
    zombies.restart_proxy_hard(proxy)
    keys_state, fences = rec.check(proxy, [key], [lock])
    fk.eq(keys_state[key][0], b_put[0].value, "stored value (B's)")
    fk.eq(keys_state[key][1], b_tok, "stored Fencing-Token")
    fk.eq(fences[lock], b_tok, "fence")


def test_pause_redis(store):
    _pause(store, "redis")


def test_pause_etcd(store):
    _pause(store, "etcd")


if __name__ == "__main__":
    fk.main(globals())
