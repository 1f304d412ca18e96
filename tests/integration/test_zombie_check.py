"""scripts/zombie-check.sh, run as users run it, on the example workers of
scripts/examples/ (docs/testing.md), and the lock metrics the recipes of scripts/locks/
print (docs/locks.md, "Lock metrics").

  test_default_invocation   `bash scripts/zombie-check.sh -- scripts/examples/report-worker.sh`
                            from the repository root, nothing else: private Redis and
                            fencekeeper (file store), 3 rounds; exit 0, SAFE, every zombie
                            refused as stale, its temp dir and servers gone afterwards.
  test_safe_and_unsafe      per store (file, Postgres): the correct worker is SAFE (exit 0),
                            the broken one (a constant token) UNSAFE (exit 1), from the
                            --json report; on Postgres its schema is dropped at the end.
  test_etcd_python_worker   the Python worker of the docs, 3 instances, on a given etcd.
  test_failed_rounds        a zombie that hangs past --timeout and a worker that never
                            writes are not SAFE (exit 1); the hung process is killed.
  test_usage_errors         exit 2 and a message, before anything is started.
  test_lock_events_*        the three events of the recipes, as JSON lines on stderr.

zombie-check starts the fencekeeper under test (FENCEKEEPER_BIN) itself. Needs redis-server,
redis-cli, etcdctl, psql and curl on PATH (scripts/test.sh installs them).
"""
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import fk
import zombies

SCRIPT = os.path.join("scripts", "zombie-check.sh")
GOOD = os.path.join("scripts", "examples", "report-worker.sh")
BROKEN = os.path.join("scripts", "examples", "report-worker-broken.sh")
PYTHON = os.path.join("scripts", "examples", "report_worker.py")
HANG_GUARD_S = 240  # a whole run takes ~10 s; this only stops a hung one


def _need_tools(*tools):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        fk.missing("zombie-check needs %s on PATH" % ", ".join(missing))


def zombie_check(args, env=None, guard=HANG_GUARD_S):
    """Runs `bash scripts/zombie-check.sh ARGS` from the repository root, in its own
    session (so a hung run and everything it started can be stopped together)."""
    e = dict(os.environ)
    e["FENCEKEEPER_BIN"] = fk.require_binary()
    e.update(env or {})
    p = subprocess.Popen(["bash", SCRIPT] + list(args), cwd=fk.REPO, env=e, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=guard)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)  # its trap stops what it started
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        fk.fail("zombie-check still running after %d s:\n%s\n%s" % (guard, out.decode(errors="replace"),
                                                                    err.decode(errors="replace")))
    out, err = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    print("$ zombie-check %s  -> exit %d (%s)" % (" ".join(args), p.returncode, fk._current_test))
    print(out, end="")
    if err:
        print("--- stderr:\n" + err, end="")
    return p.returncode, out, err


def report(args, env=None):
    rc, out, err = zombie_check(["--json"] + list(args), env)
    try:
        rep = json.loads(out)
    except ValueError as e:
        fk.fail("--json printed no JSON (%s): %r" % (e, out))
    fk.eq(rep["exit"], rc, "exit status in the report")
    return rc, rep, err


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_default_invocation():
    _need_tools("redis-server", "redis-cli", "curl")
    rc, out, err = zombie_check(["--", GOOD])
    fk.eq(rc, 0, "exit status of the default invocation")
    lines = out.splitlines()
    m = re.search(r'lock "(zombie-check-[0-9a-f]+)" from a private Redis on 127\.0\.0\.1:(\d+) \(TTL 1000 ms\), '
                  r'a private fencekeeper on 127\.0\.0\.1:(\d+), the file store in (/tmp/zombie-check\.\w+)/data', out)
    fk.check(m is not None, "the header names no private Redis, fencekeeper and file store")
    redis_port, fk_port, work = int(m.group(2)), int(m.group(3)), m.group(4)
    rounds = [l for l in lines if l.startswith("round ")]
    fk.eq(len(rounds), 3, "round lines (one per round)")
    for i, l in enumerate(rounds):
        m = re.match(r"^round %d/3 \[[^]]+\]: ([AB]) frozen with token (\d+); ([AB]) \(token (\d+), exit 0\) took over, "
                     r"2 write\(s\) applied; ([AB]) resumed: sent 1 write\(s\), fencekeeper applied 0, refused 1 as stale; "
                     r"([AB]) exited 1 -> SAFE$" % (i + 1), l)
        fk.check(m is not None, "round line: %r" % l)
        z, ztok, h, htok = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
        fk.check(z != h and m.group(5) == z and m.group(6) == z, "instances in %r" % l)
        fk.eq(z, "AB"[i % 2], "the zombie rotates")
        fk.check(htok > ztok, "holder token %d not above the zombie's %d" % (htok, ztok))
    fk.check(lines[-1].startswith("SAFE: in all 3 rounds"), "verdict line %r" % lines[-1])
    # Rounds 1 and 3 start the holder while the zombie holds the lock (contended, unless
    # the machine took a whole TTL to start it: not asserted here, test_lock_events_* test
    # the events deterministically); every zombie's hold outlived its lock.
    m = re.search(r"^lock metrics: (\d+) contended acquisition\(s\), 3 hold\(s\) outlived the lock, "
                  r"0 failed release\(s\)$", out, re.M)
    fk.check(m is not None, "lock metrics line")
    fk.check(not os.path.exists(work), "zombie-check left %s behind" % work)
    fk.check(not port_open(redis_port) and not port_open(fk_port), "its Redis or fencekeeper still listens")


def _store_args(store):
    if store.kind == "file":
        return ["--store", store.url]
    return ["--store", fk.require_service("postgres"),
            "--redis", "redis://127.0.0.1:%d" % int(fk.require_service("redis"))]


def test_safe_and_unsafe(store):
    _need_tools("redis-server", "redis-cli", "curl", "psql")
    rc, rep, _ = report(_store_args(store) + ["--", GOOD])
    fk.eq((rc, rep["verdict"]), (0, "SAFE"), "correct worker on %s" % store.kind)
    fk.eq(rep["store"]["kind"], store.kind, "store kind")
    fk.eq([r["verdict"] for r in rep["rounds"]], ["SAFE"] * 3, "round verdicts")
    for r in rep["rounds"]:
        z = r["zombie"]
        fk.eq((z["applied"], z["stale"], z["exit"]), (0, 1, 1), "zombie of round %d refused" % r["round"])
        fk.eq(r["holders_writes"]["applied"], 2, "holder writes of round %d" % r["round"])
        fk.check(all(h["token"] > z["token"] and h["exit"] == 0 for h in r["holders"]),
                 "holders of round %d: %r" % (r["round"], r["holders"]))
    fk.eq(rep["lock_metrics"]["lock_lost"], 3, "every zombie's hold outlived its lock")
    fk.eq(rep["lock_metrics"]["lock_release_failed"], 0, "failed releases")
    fk.check(rep["lock_metrics"]["lock_contended"] >= 1, "contended: %r" % rep["lock_metrics"])

    rc, rep, _ = report(_store_args(store) + ["--rounds", "2", "--", BROKEN])
    fk.eq((rc, rep["verdict"]), (1, "UNSAFE"), "broken worker on %s" % store.kind)
    fk.eq([r["verdict"] for r in rep["rounds"]], ["UNSAFE"] * 2, "round verdicts")
    for r in rep["rounds"]:
        fk.eq((r["zombie"]["applied"], r["zombie"]["stale"]), (2, 0), "the zombie's writes were applied")
    if store.kind == "postgres":
        left = fk.psql("SELECT count(*) FROM pg_namespace WHERE nspname = '%s'" % rep["store"]["schema"])
        fk.eq(left.strip(), "0", "zombie-check's schema was not dropped")


def test_etcd_python_worker():
    _need_tools("etcdctl", "curl", "python3")
    endpoints = fk.require_service("etcd")
    rc, rep, _ = report(["--lock-service", "etcd", "--etcd", endpoints, "--instances", "3", "--rounds", "3",
                         "--", "python3", PYTHON])
    fk.eq((rc, rep["verdict"]), (0, "SAFE"), "the Python worker on etcd")
    fk.eq(rep["ttl_ms"], 2000, "etcd's TTL: whole seconds, at least 2")
    fk.eq([r["zombie"]["instance"] for r in rep["rounds"]], ["A", "B", "C"], "the zombie rotates")
    for r in rep["rounds"]:
        fk.eq(len(r["holders"]), 2, "two holders after each zombie")
        fk.eq((r["zombie"]["applied"], r["zombie"]["stale"]), (0, 1), "zombie of round %d" % r["round"])
        fk.eq(r["holders_writes"]["applied"], 4, "holder writes of round %d" % r["round"])
    fk.eq(rep["lock_metrics"]["lock_lost"], 3, "every zombie's session expired under it")
    fk.check(rep["lock_metrics"]["lock_contended"] >= 1, "contended: %r" % rep["lock_metrics"])


def test_failed_rounds():
    _need_tools("redis-server", "redis-cli", "curl")
    d = fk.tmpdir("zc-workers")
    hang = os.path.join(d, "hang.sh")
    pidfile = os.path.join(d, "hung.pid")
    with open(hang, "w") as f:
        f.write('#!/bin/sh\n[ "$ZOMBIE_CHECK_INSTANCE" = A ] || exit 0\n'
                'echo "hanging" >&2\nsleep 300 &\necho $! > %s\nwait\n' % pidfile)
    os.chmod(hang, 0o755)
    rc, out, err = zombie_check(["--rounds", "1", "--timeout", "3", "--", hang])
    fk.eq(rc, 1, "a zombie hanging past --timeout")
    fk.check(re.search(r"A exited timeout -> FAIL \(the zombie A still ran after 3 s\)$", out, re.M),
             "round line of the hang")
    fk.check(out.splitlines()[-1].startswith("FAIL: round(s) 1 failed"), "verdict of the hang")
    fk.check("| hanging" in err, "the worker's stderr is shown for a failed round")
    hung = int(open(pidfile).read())
    deadline = time.monotonic() + 5
    while os.path.exists("/proc/%d" % hung) and time.monotonic() < deadline:
        time.sleep(0.05)
    fk.check(not os.path.exists("/proc/%d" % hung), "the hung worker's child was left running")

    rc, out, _ = zombie_check(["--rounds", "1", "--", "true"])
    fk.eq(rc, 1, "a worker that never writes")
    fk.check(out.splitlines()[-1].startswith("FAIL: no holder ever had a write applied"), "verdict of `true`")


def test_usage_errors():
    for args, what in ((["--", ], "no worker command"),
                       (["--rounds", "0", "--", "true"], "needs a positive integer"),
                       (["--bogus", "--", "true"], "unknown argument"),
                       (["--lock-service", "zookeeper", "--", "true"], "must be redis or etcd"),
                       (["--store", "s3://x", "--", "true"], "--store must be"),
                       (["--fencekeeper", "http://127.0.0.1:1", "--store", "file:/tmp/x", "--", "true"],
                        "not with --fencekeeper"),
                       (["--instances", "1", "--", "true"], "--instances must be 2 to 26"),
                       (["--json"], "no worker command")):
        rc, out, err = zombie_check(args)
        fk.eq(rc, 2, "exit status for %r" % args)
        fk.check(what in err, "message for %r: %r" % (args, err))
        fk.eq(out, "", "nothing on stdout for %r" % args)
    # A set-up error: the fencekeeper given is not there.
    rc, out, err = zombie_check(["--fencekeeper", "http://127.0.0.1:%d" % fk.free_port(), "--", "true"])
    fk.eq(rc, 2, "exit status when the fencekeeper is unreachable")
    fk.check("set-up error: fencekeeper at" in err, "message: %r" % err)


def test_docs_show_the_examples():
    """docs/testing.md shows the example workers as they are: its Python block is
    report_worker.py (after its docstring), its put() is report-worker.sh's, and the
    broken worker differs from the correct one in the token it sends."""
    doc = open(os.path.join(fk.REPO, "docs", "testing.md")).read()
    blocks = re.findall(r"```(\w*)\n(.*?)```", doc, re.S)
    py = open(os.path.join(fk.REPO, PYTHON)).read()
    body = py.split('"""', 2)[2].lstrip("\n")
    fk.check(any(lang == "python" and text == body for lang, text in blocks),
             "docs/testing.md has no Python block equal to %s" % PYTHON)
    good = open(os.path.join(fk.REPO, GOOD)).read()
    put = [text for lang, text in blocks if lang == "sh" and text.startswith("put() {")]
    fk.check(len(put) == 1 and put[0] in good, "docs/testing.md's put() is not the one in %s" % GOOD)
    broken = open(os.path.join(fk.REPO, BROKEN)).read()
    fk.check('-H "Fencing-Token: 1"' in broken and "$FENCING_TOKEN\"" not in broken.split("put()")[1].split("}")[0],
             "the broken worker does not send the constant token")


# --- the recipes' lock metrics --------------------------------------------------------

def run(cmd, env, timeout=30):
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env), timeout=timeout)


def events(stderr):
    """The lock events (parsed) in a recipe's stderr; every line that looks like one must parse."""
    out = []
    for line in stderr.splitlines():
        if line.startswith('{"event":'):
            out.append(json.loads(line))
    return out


def _eval_calls(c):
    """EVALs this Redis has run (each redis-lock.sh attempt is one)."""
    m = re.search(rb"cmdstat_eval:calls=(\d+)", c.call("INFO", "commandstats"))
    return int(m.group(1)) if m else 0


def test_lock_events_redis():
    srv = zombies.RedisServer(name="events").start()
    try:
        env = zombies.redis_env(srv.port)
        sh = os.path.join(zombies.LOCKS, "redis-lock.sh")
        lock = 'ev "quoted" \\ ' + fk.rand_name(4)          # must come out as valid JSON
        r = run([sh, lock, "5000", "--", "true"], env)
        fk.eq((r.returncode, events(r.stderr)), (0, []), "an uneventful hold prints nothing (%s)" % r.stderr)
        with srv.client() as c:
            # Contended and given up: the lock is somebody else's (no TTL: no timing).
            c.call("SET", "lock:" + lock, "somebody")
            r = run([sh, lock, "5000", "--", "true"], env)
            fk.eq(r.returncode, 75, "held")
            ev = events(r.stderr)
            fk.eq([(e["event"], e["lock"], e["recipe"], e["acquired"], e["attempts"]) for e in ev],
                  [("lock_contended", lock, "redis-lock.sh", False, 1)], "given up: %s" % r.stderr)
            # Contended, then acquired: freed only once the waiter has tried at least once.
            before = _eval_calls(c)
            w = subprocess.Popen([sh, lock, "5000", "--", "true"], env=dict(os.environ, LOCK_WAIT_MS="10000", **env),
                                 stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 10
            while _eval_calls(c) <= before + 1 and time.monotonic() < deadline:   # two failed tries
                time.sleep(0.005)
            c.call("DEL", "lock:" + lock)
            _, werr = w.communicate(timeout=20)
        fk.eq(w.returncode, 0, "waited: %s" % werr)
        ev = events(werr)
        fk.eq([(e["event"], e["acquired"]) for e in ev], [("lock_contended", True)], "acquired after waiting")
        fk.check(ev[0]["attempts"] > 2 and ev[0]["waited_ms"] > 0 and isinstance(ev[0]["token"], int), repr(ev))
        # Lost: the command outlives the TTL (0.6 s of work, 300 ms TTL).
        r = run([sh, lock, "300", "--", "sleep", "0.6"], env)
        fk.eq(r.returncode, 0, "the slow holder")
        ev = events(r.stderr)
        fk.eq([(e["event"], e["ttl_ms"]) for e in ev], [("lock_lost", 300)], "the slow holder: %s" % r.stderr)
        fk.check(ev[0]["held_ms"] >= 300, repr(ev))
        # Release failed: Redis is gone when the command ends; the command's status stays.
        r = run([sh, lock, "5000", "--", "sh", "-c", "redis-cli -p %d shutdown nosave; exit 3" % srv.port], env)
        fk.eq(r.returncode, 3, "exit status of the command")
        ev = events(r.stderr)
        fk.eq([e["event"] for e in ev], ["lock_release_failed"], "release with Redis down: %s" % r.stderr)
        fk.check("Could not connect" in ev[0]["error"], repr(ev))
    finally:
        srv.kill()


def test_lock_events_etcd():
    env = zombies.etcd_env()
    sh = os.path.join(zombies.LOCKS, "etcd-lock.sh")
    lock = "ev-etcd-" + fk.rand_name(6)
    r = run([sh, lock, "--", "true"], env)
    fk.eq((r.returncode, events(r.stderr)), (0, []), "an uneventful hold prints nothing (%s)" % r.stderr)
    # Contended: the first holder lets go only once the second is queued behind it (two
    # keys under the lock's prefix), so the second waits whatever the timing.
    d = fk.tmpdir("ev-etcd")
    marker, go = os.path.join(d, "holding"), os.path.join(d, "go")
    holder = subprocess.Popen([sh, lock, "--", "sh", "-c", 'touch "$0"; while [ ! -e "$1" ]; do sleep 0.01; done',
                               marker, go], env=dict(os.environ, **env))
    deadline = time.monotonic() + 10
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.005)
    w = subprocess.Popen([sh, lock, "--", "sh", "-c", "echo $FENCING_TOKEN"], env=dict(os.environ, **env),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while time.monotonic() < deadline:
        keys = run(["etcdctl", "get", "--prefix", "--keys-only", lock + "/"], env).stdout.split()
        if len(keys) >= 2:
            break
        time.sleep(0.02)
    open(go, "w").close()
    fk.eq(holder.wait(10), 0, "first holder")
    out, err = w.communicate(timeout=20)
    fk.eq(w.returncode, 0, "waiting holder: %s" % err)
    ev = events(err)
    fk.eq([(e["event"], e["recipe"], e["token"]) for e in ev],
          [("lock_contended", "etcd-lock.sh", int(out))], "contended: %s" % err)
    fk.check(ev[0]["waited_ms"] > 0, repr(ev))
    # Lost: the holder's key is gone at release (here deleted under it, as a lease expiry
    # does; the frozen case is zombie-check's, test_etcd_python_worker).
    r = run([sh, lock, "--", "sh", "-c", 'etcdctl del "$ETCD_LOCK_KEY" >/dev/null; exit 4'], env)
    fk.eq([e["event"] for e in events(r.stderr)], ["lock_lost"], "lost: %s" % r.stderr)
    fk.eq("ETCD_LOCK_SH_EVENTS" in run([sh, lock, "--", "env"], env).stdout, False, "internal variable leaked")


def test_lock_release_failed_etcd():
    """etcd is gone when the command ends: the delete that releases the lock fails. A
    private etcd, killed by the command itself (the shared one serves other tests)."""
    fk.require_tool("etcd")
    fk.require_tool("etcdctl")
    d = fk.tmpdir("ev-etcd-down")
    port, peer = fk.free_port(), fk.free_port()
    url = "http://127.0.0.1:%d" % port
    srv = subprocess.Popen(["etcd", "--name", "ev", "--data-dir", os.path.join(d, "data"),
                            "--listen-client-urls", url, "--advertise-client-urls", url,
                            "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                            "--initial-cluster", "ev=http://127.0.0.1:%d" % peer],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env = {"ETCDCTL_API": "3", "ETCDCTL_ENDPOINTS": url, "ETCDCTL_DIAL_TIMEOUT": "1s",
               "ETCDCTL_COMMAND_TIMEOUT": "2s"}
        deadline = time.monotonic() + 30
        while run(["etcdctl", "endpoint", "health"], env).returncode != 0:
            fk.check(time.monotonic() < deadline and srv.poll() is None, "the private etcd did not start")
            time.sleep(0.1)
        sh = os.path.join(zombies.LOCKS, "etcd-lock.sh")
        # The event comes once our delete has failed (ETCDCTL_COMMAND_TIMEOUT). etcdctl's
        # own unlock after it retries until etcd answers again, so the recipe does not exit
        # while etcd stays down (docs/locks.md): the test reads the event, then ends it.
        rec = subprocess.Popen([sh, "ev-down-" + fk.rand_name(4), "--", "sh", "-c",
                                "kill -9 %d; exit 3" % srv.pid],
                               env=dict(os.environ, **env), stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in rec.stderr], daemon=True).start()
        try:
            line, deadline = "", time.monotonic() + 30
            while '"lock_release_failed"' not in line:
                fk.check(time.monotonic() < deadline, "no lock_release_failed within 30 s")
                try:
                    line = lines.get(timeout=0.5)
                except queue.Empty:
                    fk.check(rec.poll() is None, "the recipe ended without the event")
            ev = events(line)
            fk.eq([e["event"] for e in ev], ["lock_release_failed"], "release with etcd down: %r" % line)
            fk.check(ev[0]["error"] != "" and isinstance(ev[0]["token"], int), repr(ev))
        finally:
            rec.kill()
            rec.wait()
    finally:
        srv.kill()
        srv.wait()


def test_lock_events_postgres():
    url = fk.require_service("postgres")
    schema = "t_" + fk.rand_name(12)
    fk._pg_schemas.append(schema)
    fk.psql('CREATE SCHEMA "%s"' % schema, url)
    env = {"PGOPTIONS": "-c search_path=%s" % schema, "DATABASE_URL": url}
    sh = os.path.join(zombies.LOCKS, "pg-lock.sh")
    lock = "ev-pg-" + fk.rand_name(6)
    r = run([sh, lock, "--", "true"], env)
    fk.eq((r.returncode, events(r.stderr)), (0, []), "an uneventful hold prints nothing (%s)" % r.stderr)
    inner = "%s \"$FENCING_LOCK\" -- true; echo inner=$?" % sh
    r = run([sh, lock, "--", "sh", "-c", inner], env)
    fk.check("inner=75" in r.stdout, r.stdout)
    fk.eq([(e["event"], e["acquired"]) for e in events(r.stderr)], [("lock_contended", False)],
          "given up: %s" % r.stderr)
    # Lost: the holder's session is cut while it works (its advisory lock goes with it).
    cut = ("psql -X -q -d \"$DATABASE_URL\" -c \"SELECT pg_terminate_backend(pid) FROM pg_locks "
           "WHERE locktype = 'advisory' AND objid = (hashtextextended('%s', 0) & 4294967295)::oid\" >/dev/null; exit 5"
           % lock)
    r = run([sh, lock, "--", "sh", "-c", cut], env)
    fk.eq(r.returncode, 5, "exit status of the command: %s" % r.stderr)
    fk.eq([e["event"] for e in events(r.stderr)], ["lock_lost"], "session cut: %s" % r.stderr)
    # Release failed: the unlock gets an error from a live session. Here a function of the
    # same name earlier on the search path refuses (pg_catalog comes after it).
    fk.psql('CREATE FUNCTION "%s".pg_advisory_unlock(bigint) RETURNS boolean LANGUAGE plpgsql '
            "AS $$BEGIN RAISE EXCEPTION 'unlock refused by the test'; END$$" % schema, url)
    refusing = dict(env, PGOPTIONS="-c search_path=%s,pg_catalog" % schema)
    r = run([sh, lock, "--", "sh", "-c", "exit 6"], refusing)
    fk.eq(r.returncode, 6, "exit status of the command: %s" % r.stderr)
    ev = events(r.stderr)
    fk.eq([e["event"] for e in ev], ["lock_release_failed"], "unlock refused: %s" % r.stderr)
    fk.check(isinstance(ev[0]["token"], int), repr(ev))


if __name__ == "__main__":
    fk.main(globals(), needs_binary=True, after_each=zombies.cleanup)
