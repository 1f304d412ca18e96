"""Crash and restart: a lock holder saves its token to its own disk, is kill -9'ed
mid-work (think OOM killer), and is restarted later by its supervisor, which finds the
token on disk and finishes the job with it. Meanwhile the lock expired, a new holder
took it with a higher token and wrote, and fencekeeper itself was kill -9'ed and
restarted (the fence must survive that too). The restarted worker's write gets 409
stale_token and storage keeps the new holder's data.
"""
import os

import fk
import zombies

TTL_MS = 500


def test_crash_restart(store):
    port = int(fk.require_service("redis"))
    env = zombies.redis_env(port)
    proxy = store.start()
    proxy.wait_ready()
    rec = zombies.Recorder()
    lock = "crash-" + fk.rand_name(6)
    key = "jobs/%s/result.csv" % lock
    state_a = os.path.join(fk.tmpdir("state-A"), "A")

    def argv(name, *extra):
        return zombies.worker_argv("--name", name, "--lock", lock, "--key", key,
                                   "--target", zombies.fk_target(proxy), *extra)

    try:
        a = zombies.Worker("A", rec, argv("A", "--work-ms", 60000, "--state-dir", state_a),
                           wrapper=zombies.wrapper_redis(lock, TTL_MS), env=env)
        a_tok = a.wait_ev("acquired", 10)["token"]
        a.wait_ev("working", 5)
        a.kill9()          # the wrapper and the worker: no release, the lock just expires
        fk.check(os.path.exists(os.path.join(state_a, "token")), "A saved no token")
        b_env = dict(env, LOCK_WAIT_MS="10000")
        b = zombies.Worker("B", rec, argv("B", "--work-ms", 0),
                           wrapper=zombies.wrapper_redis(lock, TTL_MS), env=b_env)
        b_tok = b.wait_ev("acquired", 10)["token"]
        fk.check(b_tok > a_tok, "B's token %d should be above A's %d" % (b_tok, a_tok))
        b.wait_ev("complete", 10)
        b.wait_exit(10)
        b_put = rec.ops(kind="put", worker="B")
        fk.check(len(b_put) == 1 and b_put[0].result == "ok", "B's write: %r" % b_put)
        # fencekeeper crashes too; the restarted one must still know the fence.
        zombies.restart_proxy_hard(proxy)
        # A's supervisor restarts it: it reads its old token from disk and writes.
        a2 = zombies.Worker("A", rec, argv("A", "--resume", "--state-dir", state_a))
        resumed = a2.wait_ev("resumed", 10)
        fk.eq(resumed["token"], a_tok, "token A read back from its disk")
        a2.wait_ev("complete", 10)
        a2.wait_exit(10)
    finally:
        zombies.cleanup()
    a_put = rec.ops(kind="put", worker="A")
    fk.check(len(a_put) == 1, "A should have written once (after its restart): %r" % a_put)
    body = rec.expect_stale(a_put[0], fence=b_tok)
    print("  A (token %d) killed mid-work, B wrote with %d, fencekeeper kill -9'd and restarted, "
          "A restarted from disk: 409, current_token %d" % (a_tok, b_tok, body["current_token"]))
    zombies.restart_proxy_hard(proxy)
    keys_state, fences = rec.check(proxy, [key], [lock])
    fk.eq(keys_state[key][0], b_put[0].value, "stored value (B's)")
    fk.eq(fences[lock], b_tok, "fence")


if __name__ == "__main__":
    fk.main(globals())
