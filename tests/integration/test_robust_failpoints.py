"""Crash the file store at every named failpoint under concurrent load, restart it without
the failpoint, and check what survived (docs/file-store.md "What a crash
leaves behind").

For each failpoint the process is started with FK_FAILPOINT=name (dies at the first hit),
recovered and checked, then started again with FK_FAILPOINT=name:N (dies at the N-th hit,
N random, so mid-run with earlier writes already committed), recovered and checked.
After every recovery (robust.verify waits for the sweep that follows an unclean stop):
  - the history checker (fk.History) finds no acknowledged write lost, no fence below an
    acknowledged token, no rejected write present, no ack below an earlier ack;
  - every body served is exactly one body some write sent (bodies are unique and
    self-describing, so a torn or mixed body matches none) and equals the file on disk;
  - no `~tmp~` file is left under objects/, and no file of a key that is absent (a new
    key's body is written in place before its commit: docs/file-store.md); for the points
    between staging and the index commit, the first crash leaves such uncommitted bodies
    behind, so the sweep really ran;
  - a token below each recovered fence is refused with 409.

The startup failpoint recovery_after_roll_forward kills the process while it opens the
store, right after it renamed a committed body into place and before it deleted the redo
rows: a crash during recovery itself, then a clean restart must still find everything.

The binary must be built with -DFK_FAILPOINTS=ON (scripts/test.sh does). A binary without
them never dies: that is a failure under FK_REQUIRE_SERVICES=1, a skip otherwise.
"""

import os
import random
import signal
import time

import fk
import robust

WRITE_POINTS = ["before_body_fsync", "after_body_fsync", "before_index_commit",
                "after_index_commit", "after_rename", "before_reply"]
# At these points the first batch's bodies are on disk but not committed: all its keys are
# new, so they were written in place (not as temp files), and recovery must remove them.
UNCOMMITTED_AT = {"before_body_fsync", "after_body_fsync", "before_index_commit"}
RNG = random.Random(int(os.environ.get("FK_SEED", "0")) or None)


def probe_failpoints():
    """True when the binary dies at a failpoint; False when it ignores FK_FAILPOINT."""
    st = fk.file_store()
    p = st.proxy(env={"FK_FAILPOINT": "before_body_fsync"})
    p.start()
    try:
        p.wait_ready()
        try:
            r = p.put("probe", b"x", token=1)
        except Exception:
            r = None
        rc = p.wait(10) if r is None else None
        if r is None and rc == -signal.SIGKILL:
            return True
        if r is not None and r.status in (200, 201) and p.alive():
            return False
        raise RuntimeError("failpoint probe: unexpected outcome %r, rc %r" % (r, rc))
    finally:
        p.kill()


def crash_under_load(st, fp, history, ks, tokens, mix=None, max_s=30.0):
    """Starts the proxy with FK_FAILPOINT=fp, loads it until it dies, returns the temp files
    present right after the crash."""
    p = st.proxy(env={"FK_FAILPOINT": fp})
    p.start()
    p.wait_ready()
    cur = [p]
    load = robust.Load(lambda: cur[0], history, ks, tokens, nthreads=6, mix=mix,
                       sizes=(1, 96 * 1024), timeout=10, tag="fp")
    load.start()
    deadline = time.monotonic() + max_s
    while p.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    died = not p.alive()
    if not died:
        p.kill()
    load.stop()
    fk.check(died, "FK_FAILPOINT=%s: still alive after %.0fs of load (%s)" % (fp, max_s, history.summary()))
    fk.eq(p.wait(5), -signal.SIGKILL, "exit status at failpoint %s" % fp)
    return robust.tmp_files(st.root)


def recover_and_verify(st, history, ks, what):
    p = st.start()
    p.wait_ready()
    _, fences = robust.verify(history, p, ks, root=st.root)
    robust.check_still_fencing(p, ks, fences)
    p.kill()
    return fences


def run_write_point(name):
    st = fk.file_store()
    ks = robust.Keyspace("fp", nlocks=3, keys_per_lock=2)
    tokens = robust.Tokens(ks.locks)
    history = fk.History()
    n = RNG.randint(10, 60)
    for spec in (name, "%s:%d" % (name, n)):
        before = len(robust.acked(history))
        # The first crash: puts only, so the batch that reaches the failpoint (a batch with
        # at least one accepted write) surely staged a body. Then the full mix.
        tmp = crash_under_load(st, spec, history, ks, tokens,
                               mix={"put": 1} if spec == name else None)
        if name in UNCOMMITTED_AT and spec == name:
            # The first hit is in the first write's own batch, before its commit: its body
            # sits at its final path; after recovery the key must be absent with no file
            # (robust.verify checks that for every key).
            # (Temp files may be there too: a second write of a key whose first body is
            # still undecided stages a temp file. That write can even reach the failpoint
            # first, on another pool thread, before the first write created its body; then
            # the temp file is the uncommitted state on disk.)
            fk.check(robust.object_files(st.root) or tmp,
                     "%s: no uncommitted body or temp file on disk after the crash" % spec)
        if spec != name:
            fk.check(len(robust.acked(history)) > before,
                     "%s: no write acknowledged before the crash (the N-th hit should come mid-run)" % spec)
        recover_and_verify(st, history, ks, spec)
    s = history.summary()
    print("  %s: %d ops (%s), crashes at hit 1 and %d, %d temp files at the last crash"
          % (name, len(history.ops), s, n, len(tmp)))


def make_test(name):
    def t():
        run_write_point(name)
    t.__name__ = "test_failpoint_" + name
    return t


for _n in WRITE_POINTS:
    globals()["test_failpoint_" + _n] = make_test(_n)


def expect_startup_crash(st, spec):
    p = st.proxy(env={"FK_FAILPOINT": spec})
    try:
        p.start()
    except fk.StartFailed as e:
        fk.eq(e.returncode, -signal.SIGKILL, "exit status at startup failpoint %s" % spec)
        return
    p.kill()
    fk.fail("FK_FAILPOINT=%s: the process started instead of dying while opening the store" % spec)


def test_failpoint_recovery_after_roll_forward():
    # Leave committed-but-not-renamed writes behind (crash right after the index commit,
    # puts only so the killed batch surely has a body to roll forward), then crash the
    # recovery right after it rolled one forward, then recover for real.
    st = fk.file_store()
    ks = robust.Keyspace("rf", nlocks=3, keys_per_lock=2)
    tokens = robust.Tokens(ks.locks, stale_share=0.1)
    history = fk.History()
    # A batch of first writes of new keys has nothing to roll forward (written in place),
    # and a temp file on disk may belong to a put still being staged for a later batch
    # (removed, not rolled forward): crash again until a committed write left its temp file.
    for _ in range(5):
        crash_under_load(st, "after_index_commit:%d" % RNG.randint(3, 15), history, ks,
                         tokens, mix={"put": 1})
        tmp = robust.committed_tmp_files(st.root)
        if tmp:
            break
    fk.check(tmp, "no committed temp file left to roll forward")
    expect_startup_crash(st, "recovery_after_roll_forward")
    fk.check(any(not os.path.exists(t) for t in tmp),
             "the crashed recovery renamed none of %r" % tmp)
    recover_and_verify(st, history, ks, "after a crash during roll-forward")


if __name__ == "__main__":
    fk.require_binary()
    if not probe_failpoints():
        fk.missing("%s ignores FK_FAILPOINT: it was built without -DFK_FAILPOINTS=ON"
                   % fk.binary())
    fk.main(globals())
