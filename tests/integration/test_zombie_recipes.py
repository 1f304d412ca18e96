"""The token recipes of docs/locks.md (scripts/locks/), against real servers: the Redis
Lua scripts (atomic lock + token, owner-checked release and extend, raise-fence never
lowers), the redis-lock.sh / etcd-lock.sh / pg-lock.sh wrappers (mutual exclusion,
FENCING_TOKEN strictly increasing, exit codes, no release of somebody else's lock) and
pg-token.sh. Needs no fencekeeper binary: these are the lock-service side.
"""
import os
import re
import subprocess
import time

import fk
import zombies

L = zombies.LOCKS


def run(cmd, env=None, timeout=30):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)


def test_redis_lua():
    port = int(fk.require_service("redis"))
    lock = "recipe-" + fk.rand_name(6)
    with zombies.RedisClient(port) as r:
        t1 = zombies.acquire(r, lock, "o1", 5000)
        fk.check(isinstance(t1, int) and t1 >= 1, "first token %r" % t1)
        fk.eq(zombies.acquire(r, lock, "o2", 5000), None, "acquire while held")
        pttl = r.call("PTTL", "lock:" + lock)
        fk.check(0 < pttl <= 5000, "lock TTL set atomically with the lock: PTTL %r" % pttl)
        fk.eq(r.call("PTTL", "fence:" + lock), -1, "the counter never expires")
        fk.eq(zombies.release(r, lock, "o2"), 0, "release by a non-owner")
        fk.eq(r.call("GET", "lock:" + lock), b"o1", "lock after a non-owner's release")
        fk.eq(r.call("EVAL", zombies.lua("redis-extend.lua"), 1, "lock:" + lock, "o2", 60000), 0,
              "extend by a non-owner")
        fk.eq(r.call("EVAL", zombies.lua("redis-extend.lua"), 1, "lock:" + lock, "o1", 60000), 1,
              "extend by the owner")
        fk.check(r.call("PTTL", "lock:" + lock) > 5000, "extend did not extend")
        fk.eq(zombies.release(r, lock, "o1"), 1, "release by the owner")
        t2 = zombies.acquire(r, lock, "o2", 200)
        fk.check(t2 > t1, "token after release %r not above %r" % (t2, t1))
        time.sleep(0.3)
        t3 = zombies.acquire(r, lock, "o3", 5000)
        fk.check(t3 is not None and t3 > t2, "token after expiry %r not above %r" % (t3, t2))
        fk.eq(zombies.raise_fence(r, lock, t3 + 100), t3 + 100, "raise")
        fk.eq(zombies.raise_fence(r, lock, 5), t3 + 100, "raise never lowers")
        fk.eq(r.call("INCR", "fence:" + lock), t3 + 101, "next token after raise")
        try:
            zombies.raise_fence(r, lock, "abc")
            fk.fail("raise-fence accepted a non-number")
        except zombies.RedisError:
            pass


def test_redis_floor():
    """redis-acquire.lua honours the floor key fence-floor (set by redis-raise-floor.sh):
    a counter at or below it jumps above it at its next acquisition, a counter above it
    is untouched, a lock never seen starts above it; redis-lock.sh passes the key; the
    two-key call of the old recipe ignores it. A private server: the floor is global."""
    srv = zombies.RedisServer(name="floor").start()
    try:
        low, high, new = ("floor-%s-%s" % (w, fk.rand_name(4)) for w in ("low", "high", "new"))
        with srv.client() as r:
            fk.eq(zombies.acquire(r, low, "o", 5000), 1, "token without a floor")
            zombies.release(r, low, "o")
            r.call("SET", "fence:" + high, 900)
            fk.eq(zombies.raise_fence(r, "floor-unused", 0), 0, "raise-fence on a new counter")
            fk.eq(int(r.call("EVAL", zombies.lua("redis-raise-fence.lua"), 1, zombies.FLOOR_KEY, 500)), 500,
                  "raise the floor key")
            fk.eq(int(r.call("EVAL", zombies.lua("redis-raise-fence.lua"), 1, zombies.FLOOR_KEY, 7)), 500,
                  "raising the floor key never lowers it")
            fk.eq(zombies.acquire(r, low, "o", 5000), 501, "counter below the floor: floor + 1")
            fk.eq(r.call("GET", "fence:" + low), b"501", "the counter moved with the token")
            fk.eq(zombies.acquire(r, low, "o2", 5000), None, "acquire while held, floor or not")
            fk.eq(r.call("GET", "fence:" + low), b"501", "a refused acquire does not count")
            zombies.release(r, low, "o")
            fk.eq(zombies.acquire(r, low, "o", 5000), 502, "then it counts on from there")
            zombies.release(r, low, "o")
            fk.eq(zombies.acquire(r, high, "o", 5000), 901, "counter above the floor: untouched")
            zombies.release(r, high, "o")
            fk.eq(zombies.acquire(r, new, "o", 5000), 501, "a lock never seen starts above the floor")
            zombies.release(r, new, "o")
            r.call("SET", "fence:" + low, 500)     # exactly at the floor: still moves above it
            fk.eq(zombies.acquire(r, low, "o", 5000), 501, "counter at the floor")
            zombies.release(r, low, "o")
            two = r.call("EVAL", zombies.lua("redis-acquire.lua"), 2, "lock:" + new + "x", "fence:" + new + "x",
                         "o", 5000)
            fk.eq(two, 1, "the two-key call ignores the floor (its tokens would be refused)")
        sh = os.path.join(L, "redis-lock.sh")
        r = run([sh, new + "-sh", "5000", "--", "sh", "-c", 'echo $FENCING_TOKEN'], zombies.redis_env(srv.port))
        fk.eq((r.returncode, r.stdout.strip()), (0, "501"), "redis-lock.sh honours the floor (%s)" % r.stderr)
    finally:
        srv.kill()



def test_redis_raise_fence_after_a_floor():
    """redis-raise-fence.sh prints the token redis-lock.sh then gets, also once
    redis-raise-floor.sh has set the floor key above the counter it raised (the floor is
    global on Redis, fencekeeper's floor only under its prefix). A private Redis and a real
    fencekeeper: the script reads the fence from it."""
    fk.require_binary()
    srv = zombies.RedisServer(name="raise-fence").start()
    p = fk.file_store().start()
    try:
        p.wait_ready()
        url = "http://%s:%d" % (p.host, p.port)
        env = zombies.redis_env(srv.port)
        lock = "daily-report"
        fk.expect_status(p.put_fence(lock, 7), 200, "the lock's fence")
        r = run([os.path.join(L, "redis-raise-floor.sh"), "--url", url, "--prefix", "other/",
                 "--token", "1090214"], env)
        fk.eq(r.returncode, 0, "redis-raise-floor.sh (%s %s)" % (r.stdout, r.stderr))
        with srv.client() as c:
            fk.eq(c.call("GET", zombies.FLOOR_KEY), b"1090214", "the floor key")
        raise_fence = os.path.join(L, "redis-raise-fence.sh")
        lock_sh = os.path.join(L, "redis-lock.sh")
        # Below the floor (1007), then above it (margin 0 after an acquisition: 1090215).
        for margin, counter in (("1000", 1007), ("0", 1090215)):
            r = run([raise_fence, lock, url, margin], env)
            fk.eq(r.returncode, 0, "redis-raise-fence.sh (%s)" % r.stderr)
            m = re.search(r"counter fence:%s is now (\d+).*the next token will be (\d+)$" % lock,
                          r.stdout.strip())
            fk.check(m is not None, "redis-raise-fence.sh said: %r" % r.stdout)
            fk.eq(int(m.group(1)), counter, "the counter it reports")
            got = run([lock_sh, lock, "5000", "--", "sh", "-c", "echo $FENCING_TOKEN"], env)
            fk.eq(got.returncode, 0, "redis-lock.sh (%s)" % got.stderr)
            fk.eq(got.stdout.strip(), m.group(2), "the next token redis-raise-fence.sh printed "
                  "(%s) against what redis-lock.sh got" % r.stdout.strip())
    finally:
        p.stop()
        srv.kill()

def test_redis_lock_sh():
    port = int(fk.require_service("redis"))
    env = zombies.redis_env(port)
    lock = "wrap-" + fk.rand_name(6)
    sh = os.path.join(L, "redis-lock.sh")
    r = run([sh, lock, "5000", "--", "sh", "-c", 'echo "$FENCING_TOKEN $FENCING_LOCK"; exit 7'], env)
    fk.eq(r.returncode, 7, "exit status of the command (%s)" % r.stderr)
    tok, name = r.stdout.split()
    fk.eq(name, lock, "FENCING_LOCK")
    # Held: a second holder gets 75 at once; the lock is released after the command.
    inner = "%s %s 5000 -- true; echo inner=$?" % (sh, lock)
    r = run([sh, lock, "5000", "--", "sh", "-c", inner], env)
    fk.check("inner=75" in r.stdout, "second holder while held: %r %r" % (r.stdout, r.stderr))
    with zombies.RedisClient(port) as c:
        fk.eq(c.call("EXISTS", "lock:" + lock), 0, "lock released after the command")
    # A command outliving the TTL must not release the next holder's lock.
    slow = subprocess.Popen([sh, lock, "300", "--", "sleep", "2"], env=dict(os.environ, **env))
    with zombies.RedisClient(port) as c:          # wait until it holds the lock
        deadline = time.monotonic() + 10
        while not c.call("EXISTS", "lock:" + lock) and time.monotonic() < deadline:
            time.sleep(0.005)
    # Once the slow holder's lock expired somebody else takes it (and releases it) ...
    r = run([sh, lock, "10000", "--", "sh", "-c", 'echo $FENCING_TOKEN'], dict(env, LOCK_WAIT_MS="5000"))
    fk.eq(r.returncode, 0, "holder after the TTL: %s" % r.stderr)
    # ... and a third holder takes it and is holding it when the slow one finishes.
    holder = subprocess.Popen([sh, lock, "10000", "--", "sleep", "4"], env=dict(os.environ, **env))
    fk.eq(slow.wait(10), 0, "slow holder")
    with zombies.RedisClient(port) as c:
        fk.eq(c.call("EXISTS", "lock:" + lock), 1, "the slow holder released somebody else's lock")
    holder.wait(10)
    fk.check(int(r.stdout.strip()) > int(tok), "tokens increase: %r then %r" % (tok, r.stdout))
    # Waiting: LOCK_WAIT_MS retries until the lock is free.
    h = subprocess.Popen([sh, lock, "10000", "--", "sleep", "0.5"], env=dict(os.environ, **env))
    with zombies.RedisClient(port) as c:
        deadline = time.monotonic() + 10
        while not c.call("EXISTS", "lock:" + lock) and time.monotonic() < deadline:
            time.sleep(0.005)
    r = run([sh, lock, "10000", "--", "sh", "-c", 'echo $FENCING_TOKEN'], dict(env, LOCK_WAIT_MS="5000"))
    h.wait(10)
    fk.eq(r.returncode, 0, "waiting holder: %s" % r.stderr)
    # Redis down: 69.
    r = run([sh, lock, "100", "--", "true"], {"REDIS_PORT": str(fk.free_port())})
    fk.eq(r.returncode, 69, "exit status with Redis down (%s)" % r.stderr)


def test_etcd_lock_sh():
    env = zombies.etcd_env()
    lock = "etcd-" + fk.rand_name(6)
    sh = os.path.join(L, "etcd-lock.sh")
    # Sequential holders: strictly increasing tokens.
    toks = []
    for i in range(3):
        r = run([sh, lock, "--", "sh", "-c", 'echo "$FENCING_TOKEN $FENCING_LOCK"'], env)
        fk.eq(r.returncode, 0, "etcd-lock.sh: %s" % r.stderr)
        t, name = r.stdout.split()
        fk.eq(name, lock, "FENCING_LOCK")
        toks.append(int(t))
    fk.check(toks == sorted(toks) and len(set(toks)) == 3, "tokens not increasing: %r" % toks)
    # Exclusion: concurrent holders run one at a time, each with a higher token.
    stamp = os.path.join(fk.tmpdir("etcd"), "log")
    cmd = 'echo "start $FENCING_TOKEN" >> %s; sleep 0.3; echo "end $FENCING_TOKEN" >> %s' % (stamp, stamp)
    ps = [subprocess.Popen([sh, lock, "--", "sh", "-c", cmd], env=dict(os.environ, **env)) for _ in range(3)]
    for p in ps:
        fk.eq(p.wait(30), 0, "concurrent etcd-lock.sh")
    lines = open(stamp).read().split("\n")[:-1]
    fk.eq(len(lines), 6, "log lines")
    seen = []
    for i in range(0, 6, 2):
        a, b = lines[i].split(), lines[i + 1].split()
        fk.check(a[0] == "start" and b[0] == "end" and a[1] == b[1], "holders overlapped: %r" % lines)
        seen.append(int(a[1]))
    fk.check(seen == sorted(seen) and seen[0] > toks[-1], "tokens in lock order: %r after %r" % (seen, toks))


def test_postgres_recipes():
    url = fk.require_service("postgres")
    schema = "t_" + fk.rand_name(12)
    fk._pg_schemas.append(schema)
    fk.psql('CREATE SCHEMA "%s"' % schema, url)
    env = {"PGOPTIONS": "-c search_path=%s" % schema, "DATABASE_URL": url}
    lock = "it's-" + fk.rand_name(4)      # a quote in the name: must be passed safely
    toks = []
    for _ in range(3):
        r = run([os.path.join(L, "pg-token.sh"), lock], env)
        fk.eq(r.returncode, 0, "pg-token.sh: %s" % r.stderr)
        toks.append(int(r.stdout))
    fk.eq(toks, [1, 2, 3], "pg-token.sh tokens")
    sh = os.path.join(L, "pg-lock.sh")
    inner = "%s \"$FENCING_LOCK\" -- true; echo inner=$?; echo token=$FENCING_TOKEN" % sh
    r = run([sh, lock, "--", "sh", "-c", inner], env)
    fk.eq(r.returncode, 0, "pg-lock.sh: %s" % r.stderr)
    fk.check("inner=75" in r.stdout and "token=4" in r.stdout, "pg-lock.sh held/tokens: %r %r"
             % (r.stdout, r.stderr))
    r = run([sh, lock, "--", "sh", "-c", "exit 5"], env)
    fk.eq(r.returncode, 5, "exit status of the command (%s)" % r.stderr)
    marker = os.path.join(fk.tmpdir("pg-lock"), "holding")
    h = subprocess.Popen([sh, lock, "--", "sh", "-c", 'touch "$0"; sleep 0.6', marker],
                         env=dict(os.environ, **env))
    deadline = time.monotonic() + 10
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.005)
    r = run([sh, lock, "--", "sh", "-c", "echo $FENCING_TOKEN"], dict(env, LOCK_WAIT_MS="5000"))
    fk.eq(h.wait(10), 0, "first pg-lock.sh holder")
    fk.eq(r.returncode, 0, "waiting pg-lock.sh: %s" % r.stderr)
    fk.eq(int(r.stdout), 7, "token of the waiting holder")
    # The floor row '' (pg-raise-floor.sh sets it): counters below it continue above it,
    # a new lock starts above it, a counter above it is untouched.
    fk.psql('INSERT INTO "%s".fencing_tokens VALUES (\'\', 100), (\'high\', 500)' % schema, url)
    for name, want in ((lock, 101), ("new-" + lock, 101), ("high", 501), (lock, 102)):
        r = run([os.path.join(L, "pg-token.sh"), name], env)
        fk.eq((r.returncode, r.stdout.strip()), (0, str(want)), "pg-token.sh %s over the floor (%s)"
              % (name, r.stderr))
    r = run([sh, lock, "--", "sh", "-c", "echo $FENCING_TOKEN"], env)
    fk.eq((r.returncode, r.stdout.strip()), (0, "103"), "pg-lock.sh over the floor (%s)" % r.stderr)
    fk.eq(run([sh, "", "--", "true"], env).returncode, 2, "pg-lock.sh refuses the floor row's name")
    fk.eq(run([os.path.join(L, "pg-token.sh"), ""], env).returncode, 2, "pg-token.sh refuses it")


def test_etcd_offset():
    """etcd-lock.sh adds the offset in fence-offset (etcd-raise-floor.sh sets it after a
    restore) as of the grant's revision: token = revision + offset, still growing."""
    env = dict(zombies.etcd_env(), ETCD_FENCE_OFFSET_KEY="fence-offset-" + fk.rand_name(6))
    lock = "etcd-off-" + fk.rand_name(6)
    sh = os.path.join(L, "etcd-lock.sh")
    show = 'echo "$FENCING_TOKEN $ETCD_LOCK_REV"'

    def holder():
        r = run([sh, lock, "--", "sh", "-c", show], env)
        fk.eq(r.returncode, 0, "etcd-lock.sh: %s" % r.stderr)
        return [int(x) for x in r.stdout.split()]

    tok, rev = holder()
    fk.eq(tok, rev, "token without an offset")
    r = run(["etcdctl", "put", env["ETCD_FENCE_OFFSET_KEY"], "1000000"], env)
    fk.eq(r.returncode, 0, "etcdctl put: %s" % r.stderr)
    tok2, rev2 = holder()
    fk.eq(tok2, rev2 + 1000000, "token with the offset")
    tok3, rev3 = holder()
    fk.check(tok3 > tok2 and tok3 == rev3 + 1000000, "tokens grow: %r %r" % ((tok2, rev2), (tok3, rev3)))
    run(["etcdctl", "put", env["ETCD_FENCE_OFFSET_KEY"], "x1"], env)
    r = run([sh, lock, "--", "sh", "-c", show], env)
    fk.check(r.returncode != 0 and not r.stdout.strip(), "a non-number offset ran the command: %r %r"
             % (r.stdout, r.stderr))
    run(["etcdctl", "del", env["ETCD_FENCE_OFFSET_KEY"]], env)


if __name__ == "__main__":
    fk.main(globals(), needs_binary=False, after_each=zombies.cleanup)
