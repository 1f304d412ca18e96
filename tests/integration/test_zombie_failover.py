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

test_failover_floor: the same failover, with the holders of the lost INCRs still
working (zombies). Without a floor, the promoted replica hands new holders the very
tokens the zombies hold, and fencekeeper accepts both (equal tokens pass): a zombie
overwrites the new holder's data, and a zombie on a lock fencekeeper never saw writes
while a new holder holds it. Then scripts/locks/redis-raise-floor.sh raises a floor
over the locks' prefix and the Redis key fence-floor: every zombie (and every holder
of a pre-repair token) gets 409 stale_token naming the floor, on every lock, including
one never fenced; new holders get tokens above the floor and write; it all survives a
kill -9 of fencekeeper, and a rerun of the script changes nothing.

test_etcd_rebuilt_then_floor and test_pg_restored_then_floor: the same story for the
other lock services' repair scripts (etcd-raise-floor.sh after etcd is rebuilt,
pg-raise-floor.sh after the token counters' database is restored from a backup).
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


def _replicated_pair():
    """A primary and a replica following it through a relay, in sync."""
    primary = zombies.RedisServer(args=["--repl-diskless-sync-delay", "0"], name="primary").start()
    relay = zombies.Relay(primary.port)
    replica = zombies.RedisServer(args=["--replicaof", "127.0.0.1", relay.port], name="replica").start()
    _wait(lambda: replica.info().get("master_link_status") == "up", 15, "the replica to sync")
    return primary, relay, replica


def _raise_floor(replica, proxy, prefix, *extra):
    script = os.path.join(zombies.LOCKS, "redis-raise-floor.sh")
    env = dict(os.environ, **zombies.redis_env(replica.port))
    r = subprocess.run([script, "--url", "http://%s:%d" % (proxy.host, proxy.port), "--prefix", prefix]
                       + list(extra), capture_output=True, text=True, env=env, timeout=60)
    fk.check(r.returncode == 0, "redis-raise-floor.sh failed (%d): %s %s" % (r.returncode, r.stdout, r.stderr))
    return r


def test_failover_floor(store):
    primary, relay, replica = None, None, None
    proxy = store.start()
    proxy.wait_ready()
    rec = zombies.Recorder()
    prefix = "fl-%s/" % fk.rand_name(6)
    A, B, C = prefix + "a", prefix + "b", prefix + "c"
    keys = []
    n = [0]

    def take(server, lock, who, ttl_ms=60000):
        owner = zombies.owner_id(who)
        with server.client() as r:
            tok = zombies.acquire(r, lock, owner, ttl_ms)
        fk.check(tok is not None, "lock %s unexpectedly held (%s)" % (lock, who))
        return tok, owner

    def drop(server, lock, owner):
        with server.client() as r:
            zombies.release(r, lock, owner)

    def write(who, lock, tok):
        """One write of a fresh value to the lock's key (every holder of a lock writes
        the same key, so an overwrite shows)."""
        n[0] += 1
        key = lock + "/data"
        if key not in keys:
            keys.append(key)
        value = "%s wrote %s with token %d (#%d)\n" % (who, key, tok, n[0])
        with proxy.client() as c:
            op, _ = zombies.direct_op(rec, who, "put", lock, key, tok, value,
                                      lambda: c.put(key, value, token=tok, lock=lock))
        return op

    def stored(lock):
        return proxy.get(lock + "/data").body

    try:
        primary, relay, replica = _replicated_pair()
        for i in range(BEFORE):
            tok, owner = take(primary, A, "before", 5000)
            op = write("before", A, tok)
            fk.check(op.result == "ok", "write before the failover: %r %r" % (op, rec.reply(op)))
            drop(primary, A, owner)
        _wait(lambda: replica.call("GET", "fence:" + A) == str(BEFORE).encode(), 10,
              "the replica's counter to reach %d" % BEFORE)
        _wait(lambda: replica.call("EXISTS", "lock:" + A) == 0, 10, "the replica to see the last release")

        relay.cut()
        # On the doomed primary: w4 takes A, writes with 4 and lets go (fencekeeper has
        # fence 4 for A); then zombies take A (5), B (1) and C (1) and stay at work.
        t_w4, owner = take(primary, A, "w4", 5000)
        op = write("w4", A, t_w4)
        fk.check(op.result == "ok", "w4's write: %r %r" % (op, rec.reply(op)))
        drop(primary, A, owner)
        za, _ = take(primary, A, "zombie-a")
        zb, _ = take(primary, B, "zombie-b")
        zc, _ = take(primary, C, "zombie-c")
        fk.eq((t_w4, za, zb, zc), (BEFORE + 1, BEFORE + 2, 1, 1), "tokens the old primary issued")
        time.sleep(0.3)
        fk.eq(replica.call("GET", "fence:" + A), str(BEFORE).encode(),
              "replica's counter before the failover (the last INCRs must not have arrived)")
        primary.kill()
        relay.close()
        fk.eq(replica.call("REPLICAOF", "NO", "ONE"), "OK", "promotion")

        # Without a floor: the counters went backwards, new holders get used tokens.
        n4, o = take(replica, A, "new-4", 5000)
        fk.eq(n4, t_w4, "new holder's token on %s (w4 already used it)" % A)
        op = write("new-4", A, n4)
        fk.check(op.result == "ok", "equal token accepted: %r %r" % (op, rec.reply(op)))
        drop(replica, A, o)
        n5, o5 = take(replica, A, "new-5", 5000)
        fk.eq(n5, za, "new holder's token on %s (zombie-a holds it)" % A)
        op = write("new-5", A, n5)
        fk.check(op.result == "ok", "new holder's write: %r %r" % (op, rec.reply(op)))
        zop = write("zombie-a", A, za)
        fk.check(zop.result == "ok", "zombie-a's write with the same token: %r %r" % (zop, rec.reply(zop)))
        fk.eq(stored(A), zop.value, "%s holds the zombie's value: it overwrote the new holder" % A)
        drop(replica, A, o5)
        nb, ob = take(replica, B, "new-b", 5000)
        fk.eq(nb, zb, "new holder's token on %s (zombie-b holds it)" % B)
        zop_b = write("zombie-b", B, zb)
        fk.check(zop_b.result == "ok", "zombie-b on a lock fencekeeper never saw: %r %r"
                 % (zop_b, rec.reply(zop_b)))
        op = write("new-b", B, nb)
        fk.check(op.result == "ok", "new-b's write: %r %r" % (op, rec.reply(op)))
        drop(replica, B, ob)
        print("  without a floor: the promoted replica handed out %s %d (w4 had written with it),"
              " %s %d and %s %d (held by zombies); fencekeeper accepted both holders of each, and"
              " zombie-a overwrote new-5's data" % (A, n4, A, n5, B, nb))

        # The repair.
        r = _raise_floor(replica, proxy, prefix)
        print("  repair:\n    " + (r.stdout + r.stderr).strip().replace("\n", "\n    "))
        with proxy.client() as c:
            floors = c.request("GET", "/v1/floors")
        fk.eq(floors.status, 200, "GET /v1/floors")
        mine = [f for f in floors.json()["floors"] if f["prefix"] == prefix]
        fk.eq(len(mine), 1, "floor of %s in %r" % (prefix, floors.json()))
        floor = mine[0]["token"]
        fk.check(floor >= max(n5, 1) + 1000000, "floor %d below the highest token + the margin" % floor)
        fk.eq(int(replica.call("GET", zombies.FLOOR_KEY)), floor, "Redis fence-floor")
        got = proxy.fence(C).json()
        fk.eq((got["token"], got.get("floor")), (floor, prefix), "effective fence of never-fenced %s" % C)

        # Every zombie and every pre-repair holder is refused, with the floor in the body.
        stale = [("zombie-a", A, za), ("zombie-b", B, zb), ("zombie-c", C, zc),
                 ("new-4", A, n4), ("new-b", B, nb)]
        # The first rejection per lock goes to the store, which names the floor. On
        # Postgres a later one is answered from the fence cache, which names it too (the
        # floor it learned from the first: backends/floor_names.hpp).
        for who, lock, tok in stale:
            op = write(who, lock, tok)
            body = rec.expect_stale(op, fence=floor)
            fk.eq(body.get("floor"), prefix, "409 body floor for %s on %s" % (who, lock))
        # New holders: tokens above the floor, on every lock, writes accepted.
        fresh = {}
        for lock in (A, B, C):
            tok, o = take(replica, lock, "after", 5000)
            fk.eq(tok, floor + 1, "first token on %s after the repair" % lock)
            op = write("after", lock, tok)
            fk.check(op.result == "ok", "new holder after the repair: %r %r" % (op, rec.reply(op)))
            drop(replica, lock, o)
            fresh[lock] = tok
        print("  after the repair: floor %d; zombies' tokens %s all 409 with floor %r; new holders"
              " got %d and wrote" % (floor, sorted({t for _, _, t in stale}), prefix, floor + 1))

        # Rerun with the floor as the exact token: already done, nothing moves.
        r = _raise_floor(replica, proxy, prefix, "--token", str(floor))
        fk.eq(int(replica.call("GET", zombies.FLOOR_KEY)), floor, "fence-floor after a rerun")
        with proxy.client() as c:
            again = [f["token"] for f in c.request("GET", "/v1/floors").json()["floors"] if f["prefix"] == prefix]
        fk.eq(again, [floor], "floor after a rerun")
        tok, o = take(replica, A, "after-rerun", 5000)
        fk.eq(tok, floor + 2, "token after a rerun")
        op = write("after-rerun", A, tok)
        fk.check(op.result == "ok", "write after the rerun: %r %r" % (op, rec.reply(op)))
        drop(replica, A, o)
        fresh[A] = tok
    finally:
        zombies.cleanup()
    zombies.restart_proxy_hard(proxy)
    # The floor survived the kill -9.
    op = write("zombie-c", C, zc)
    fk.eq(rec.expect_stale(op, fence=fresh[C]).get("floor"), None,
          "409 after restart: %s's own fence is above the floor, so no floor in the body" % C)
    op = write("zombie-late", prefix + "d", 1)
    fk.eq(rec.expect_stale(op, fence=floor).get("floor"), prefix, "409 after restart on a new lock")
    keys_state, fences = rec.check(proxy, keys, [A, B, C])
    for lock in (A, B, C):
        fk.eq(fences[lock], fresh[lock], "final fence of %s" % lock)
        fk.eq(keys_state[lock + "/data"][1], fresh[lock], "final token of %s's data" % lock)


def _run(cmd, env, timeout=60):
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env),
                          timeout=timeout)


class _Etcd:
    """A private one-node etcd on free loopback ports: a fresh cluster, revision 1."""

    def __init__(self, name):
        fk.require_tool("etcd")
        fk.require_tool("etcdctl")
        d = fk.tmpdir("etcd-" + name)
        url = "http://127.0.0.1:%d" % fk.free_port()
        peer = "http://127.0.0.1:%d" % fk.free_port()
        self.name = name
        self.log = open(os.path.join(d, "log"), "wb")
        self.proc = subprocess.Popen(
            ["etcd", "--name", name, "--data-dir", os.path.join(d, "data"),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", "%s=%s" % (name, peer)],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.env = {"ETCDCTL_API": "3", "ETCDCTL_ENDPOINTS": url}
        _wait(lambda: self.proc.poll() is None
              and _run(["etcdctl", "endpoint", "health"], self.env, 10).returncode == 0,
              60, "etcd %s to answer" % name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.log.close()


def _put(proxy, lock, tok, who):
    with proxy.client() as c:
        return c.put(lock + "/data", who.encode(), token=tok, lock=lock)


def _applied(r, what):
    fk.check(r.status in (200, 201), "%s: expected 2xx, got %d %r" % (what, r.status, r.body[:300]))


def _refused_by_floor(r, floor, prefix, what):
    fk.expect_status(r, 409, what)
    body = r.json()
    fk.eq((body.get("error"), body.get("current_token"), body.get("floor")),
          ("stale_token", floor, prefix), what + ": 409 body")


def _floor_of(proxy, prefix):
    with proxy.client() as c:
        r = c.request("GET", "/v1/floors")
    fk.expect_status(r, 200, "GET /v1/floors")
    mine = [f["token"] for f in r.json()["floors"] if f["prefix"] == prefix]
    fk.eq(len(mine), 1, "floor of %s in %r" % (prefix, r.json()))
    return mine[0]


def test_etcd_rebuilt_then_floor():
    """etcd lost and rebuilt empty (a restore from an old snapshot is the same story):
    revisions start over, so new holders get tokens that holders of the lost cluster
    (zombies) hold, and a zombie overwrites a new holder. scripts/locks/etcd-raise-floor.sh,
    run against the new cluster, raises a floor over the prefix and the offset key that
    etcd-lock.sh adds to revisions: every zombie gets 409 naming the floor, new holders
    get tokens above it and write. (File store: the floor itself is tested on both.)"""
    proxy = fk.file_store().start()
    proxy.wait_ready()
    prefix = "ef-%s/" % fk.rand_name(6)
    A, B = prefix + "a", prefix + "b"
    sh = os.path.join(zombies.LOCKS, "etcd-lock.sh")

    def grant(cluster, lock):
        r = _run([sh, lock, "--", "sh", "-c", 'echo "$FENCING_TOKEN"'], cluster.env)
        fk.eq(r.returncode, 0, "etcd-lock.sh on %s: %s" % (cluster.name, r.stderr))
        return int(r.stdout)

    old = new = None
    try:
        old = _Etcd("old")
        for i in range(3):
            _applied(_put(proxy, A, grant(old, A), "before-%d" % i), "holder of %s before" % A)
        za, zb = grant(old, A), grant(old, B)    # granted, then frozen: zombies
        old.stop()
        new = _Etcd("new")
        na, nb = grant(new, A), grant(new, B)
        fk.check(nb <= zb and na <= za, "the new cluster reissues tokens: %s %d <= %d, %s %d <= %d"
                 % (A, na, za, B, nb, zb))
        # Without a floor: B's new holder writes, then B's zombie overwrites it.
        _applied(_put(proxy, B, nb, "new-b"), "new holder of %s" % B)
        _applied(_put(proxy, B, zb, "zombie-b"), "zombie of %s, before the repair" % B)
        fk.eq(proxy.get(B + "/data").body, b"zombie-b", "the zombie overwrote the new holder")

        r = _run([os.path.join(zombies.LOCKS, "etcd-raise-floor.sh"), "--url",
                  "http://%s:%d" % (proxy.host, proxy.port), "--prefix", prefix], new.env)
        fk.eq(r.returncode, 0, "etcd-raise-floor.sh: %s %s" % (r.stdout, r.stderr))
        print("  repair:\n    " + (r.stdout + r.stderr).strip().replace("\n", "\n    "))
        floor = _floor_of(proxy, prefix)
        fk.check(floor > max(za, zb) + 1000000 - 1, "floor %d not above the tokens + the margin" % floor)
        off = _run(["etcdctl", "get", "fence-offset", "--print-value-only"], new.env)
        fk.eq(off.stdout.strip(), str(floor), "fence-offset on the new cluster")

        for who, lock, tok in (("zombie-a", A, za), ("zombie-b", B, zb), ("new-a", A, na)):
            _refused_by_floor(_put(proxy, lock, tok, who), floor, prefix,
                              "%s with token %d after the repair" % (who, tok))
        for lock in (A, B, prefix + "c"):
            tok = grant(new, lock)
            fk.check(tok > floor, "token %d on %s after the repair: not above the floor %d"
                     % (tok, lock, floor))
            _applied(_put(proxy, lock, tok, "after"), "holder of %s after the repair" % lock)
            fk.eq(proxy.get(lock + "/data").body, b"after", "%s's data" % lock)
        print("  etcd rebuilt: tokens %s %d / %s %d reissued as %d / %d; floor %d; zombies refused,"
              " new holders wrote" % (A, za, B, zb, na, nb, floor))
    finally:
        for cluster in (old, new):
            if cluster:
                cluster.stop()


def test_pg_restored_then_floor():
    """The Postgres that holds the fencing_tokens counters (scripts/locks/pg-tokens.sql)
    restored to a point before its last grants: counters go back, new holders get the
    tokens zombies hold. scripts/locks/pg-raise-floor.sh raises fencekeeper's floor over
    the prefix and the counters' floor row '': zombies get 409 naming the floor, new
    holders get tokens above it and write."""
    url = fk.require_service("postgres")
    schema = "t_" + fk.rand_name(12)
    fk._pg_schemas.append(schema)
    fk.psql('CREATE SCHEMA "%s"' % schema, url)
    env = {"PGOPTIONS": "-c search_path=%s" % schema, "DATABASE_URL": url}
    proxy = fk.file_store().start()
    proxy.wait_ready()
    prefix = "pf-%s/" % fk.rand_name(6)
    A, B = prefix + "a", prefix + "b"

    def grant(lock):
        r = _run([os.path.join(zombies.LOCKS, "pg-token.sh"), lock], env)
        fk.eq(r.returncode, 0, "pg-token.sh %s: %s" % (lock, r.stderr))
        return int(r.stdout)

    for i in range(3):
        _applied(_put(proxy, A, grant(A), "before-%d" % i), "holder of %s before" % A)
    backup = fk.psql('SELECT lock, token FROM "%s".fencing_tokens' % schema, url)
    za, zb = grant(A), grant(B)                  # granted after the backup: zombies
    rows = [line.split("|") for line in backup.splitlines() if line]
    values = ", ".join("('%s', %d)" % (k.replace("'", "''"), int(t)) for k, t in rows)
    fk.psql('DELETE FROM "%s".fencing_tokens; INSERT INTO "%s".fencing_tokens VALUES %s'
            % (schema, schema, values), url)     # the restore
    na, nb = grant(A), grant(B)
    fk.eq((na, nb), (za, zb), "the restored counters reissue the zombies' tokens")
    _applied(_put(proxy, B, nb, "new-b"), "new holder of %s" % B)
    _applied(_put(proxy, B, zb, "zombie-b"), "zombie of %s (the same token), before the repair" % B)
    fk.eq(proxy.get(B + "/data").body, b"zombie-b", "the zombie overwrote the new holder")

    r = _run([os.path.join(zombies.LOCKS, "pg-raise-floor.sh"), "--url",
              "http://%s:%d" % (proxy.host, proxy.port), "--prefix", prefix], env)
    fk.eq(r.returncode, 0, "pg-raise-floor.sh: %s %s" % (r.stdout, r.stderr))
    print("  repair:\n    " + (r.stdout + r.stderr).strip().replace("\n", "\n    "))
    floor = _floor_of(proxy, prefix)
    fk.check(floor >= max(za, zb) + 1000000, "floor %d not above the tokens + the margin" % floor)
    row = fk.psql('SELECT token FROM "%s".fencing_tokens WHERE lock = \'\'' % schema, url).strip()
    fk.eq(row, str(floor), "the counters' floor row")
    for who, lock, tok in (("zombie-a", A, za), ("zombie-b", B, zb)):
        _refused_by_floor(_put(proxy, lock, tok, who), floor, prefix,
                          "%s with token %d after the repair" % (who, tok))
    for lock in (A, B, prefix + "c"):
        tok = grant(lock)
        fk.check(tok > floor, "token %d on %s after the repair: not above the floor %d" % (tok, lock, floor))
        _applied(_put(proxy, lock, tok, "after"), "holder of %s after the repair" % lock)
    print("  Postgres counters restored: %s %d and %s %d reissued; floor %d; zombies refused, new"
          " holders wrote" % (A, za, B, zb, floor))


if __name__ == "__main__":
    fk.main(globals())
