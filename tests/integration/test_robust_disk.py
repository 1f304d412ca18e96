"""Disk faults in the file store (docs/file-store.md "Failed state").

fsync EIO, via the LD_PRELOAD shim tests/support/fsync_fault.c (libfk_fsync_fault.so, built
next to the fencekeeper binary):
  - the fdatasync of the index's WAL (ROOT/index.db-wal, which SQLite syncs at every
    commit) fails: that write gets 504 outcome_unknown (its commit was handed to the WAL),
    /readyz turns 503, every later request gets 503 (reads too), and after a restart
    without the fault every acknowledged write is intact;
  - a body's fsync fails (file.flush "fsync"), or the syncfs before a batch's commit
    (the default "syncfs"): that write gets 503 (nothing committed), same failed state;
  - fsync fails at a random moment under concurrent load: no request invoked after the
    first 5xx was received is acknowledged, and the history checker passes after restart.

Full disk on the index's WAL (shim: the append is cut short, then ENOSPC): 504, failed
state, the WAL ends in a torn frame, and the restart (SQLite's WAL recovery) ignores it
and keeps everything acknowledged.

Full disk, on a real 2 MiB tmpfs (a loop-mounted ext4 image if tmpfs cannot be mounted;
skipped with a message if neither can):
  - writes that do not fit get 503 unavailable (with Retry-After), the process keeps
    serving, reads return the earlier bodies byte for byte, a replacement that does not fit
    leaves the old body, and space freed by deletes is usable again at once;
  - filling it with small writes until anything fails, then growing the file system and
    restarting: the history checker passes, no temp file is left, bodies on disk are whole.
"""

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import tempfile
import time

import fk
import robust


def shim():
    path = os.path.join(os.path.dirname(os.path.abspath(fk.binary())), "libfk_fsync_fault.so")
    if not os.path.exists(path):
        fk.missing("%s not built (cmake --build BUILD --target fk_fsync_fault)" % path)
    return path


def fault_env(**settings):
    env = {"LD_PRELOAD": shim(), "FK_FAULT_LOG": "1"}
    # A GCC ASan binary insists on its runtime coming first; the shim is uninstrumented.
    if os.environ.get("ASAN_OPTIONS") is not None:
        env["ASAN_OPTIONS"] = os.environ["ASAN_OPTIONS"] + ":verify_asan_link_order=0"
    env.update({k: str(v) for k, v in settings.items()})
    return env


def put_op(history, c, key, lock, token, body):
    op = history.invoke("seq", "put", lock, key, token, body)
    try:
        r = c.put(key, body, token=token, lock=lock)
    except Exception as e:
        history.unknown(op, repr(e))
        return None
    history.record_response(op, r)
    return r


def expect_failed_state(p, what):
    with p.client() as c:
        fk.eq(c.readyz().status, 503, "/readyz after " + what)
        fk.expect_error(c.put("after-failure", b"x", token=10 ** 12), 503, "unavailable",
                        "a write after " + what)
        fk.eq(c.get("after-failure").status, 503, "a read after " + what)
        fk.eq(c.healthz().status, 200, "/healthz after " + what)


def sequential_eio(path_filter, fail_after, expect_codes, flush=None, failed_call=None,
                   body_size=3000, pause_s=0.0):
    st = fk.file_store()
    if flush:
        st.config = fk.deep_merge(st.config, {"file": {"flush": flush}})
    ks = robust.Keyspace("eio", nlocks=1, keys_per_lock=4)
    lock = ks.locks[0]
    history = fk.History()
    p = st.start(env=fault_env(FK_FSYNC_FAIL_PATH=path_filter, FK_FSYNC_FAIL_AFTER=fail_after))
    p.wait_ready()
    failed = None
    with p.client() as c:
        for i in range(1, 200):
            key = ks.keys[i % len(ks.keys)]
            if pause_s:
                time.sleep(pause_s)
            r = put_op(history, c, key, lock, i, robust.body_for("eio-%d" % i, body_size + i))
            fk.check(r is not None, "write %d: no reply: %r" % (i, history.ops[-1]))
            if r.status >= 500:
                failed = (i, r)
                break
            fk.check(r.status in (200, 201), "write %d: %r" % (i, r))
    fk.check(failed is not None, "no write failed with FK_FSYNC_FAIL_PATH=%s FK_FSYNC_FAIL_AFTER=%s"
             % (path_filter, fail_after))
    i, r = failed
    fk.check(r.status in expect_codes, "the write whose fsync failed: expected %s, got %r" % (expect_codes, r))
    fk.expect_error(r, r.status, {503: "unavailable", 504: "outcome_unknown"}[r.status], "failed write")
    fk.check(i > 1, "the first write already failed: the fault hit startup instead")
    fk.check("fk_fsync_fault:" in p.stderr_text(), "the shim logged no injected failure")
    if failed_call:
        fk.check("fk_fsync_fault: %s(" % failed_call in p.stderr_text(),
                 "the injected failure hit no %s() call: %s" % (failed_call, p.stderr_text()[-2000:]))
    # Log lines reach stderr from a background writer, shortly after the reply.
    p.wait_log(lambda o: o.get("level") in ("error", "fatal"))
    expect_failed_state(p, "an fsync EIO")
    p.kill()
    p2 = st.start()   # no fault
    p2.wait_ready()
    robust.verify(history, p2, ks, root=st.root)
    print("  %s: %d writes acknowledged, write %d failed with %d, failed state, all intact after restart"
          % (path_filter, len(robust.acked(history)), i, r.status))


# SQLite's WAL file beside the index; every index commit appends to it and fdatasyncs it.
WAL = "index.db-wal"


def test_index_wal_fdatasync_eio():
    # A fresh store's startup syncs the WAL 3 times (its header, the schema, the "not
    # cleanly stopped" mark); then 5 commits succeed, the 6th fails.
    sequential_eio(WAL, 8, (504,), failed_call="fdatasync")


def test_body_fsync_eio():
    # file.flush "fsync": "objects" matches body files and the directories under objects/
    # (fsynced when a key's directory or temp entry is created): the first failure before
    # the commit point is a 503, after the renames a 504.
    sequential_eio("objects", 8, (503, 504), flush="fsync", failed_call="fsync")


def test_batch_syncfs_eio():
    # file.flush "syncfs" (the default): bodies are not fsynced one by one; a batch with a
    # body too large for a redo row (over 4 KiB) syncs them with one syncfs (called on
    # objects/) before the index commit. It fails, so nothing is committed: 503.
    sequential_eio("objects", 8, (503,), failed_call="syncfs", body_size=5000)


def test_background_syncfs_eio():
    # Small bodies are copied into their redo rows and committed without a syncfs; the
    # flusher's syncfs (on objects/, after commits) makes the files durable later. When it
    # fails, the store enters the failed state: the next write gets 503, and every write
    # acknowledged before is intact after the restart (its redo row holds the body).
    sequential_eio("objects", 3, (503,), failed_call="syncfs", body_size=200, pause_s=0.03)


def wal_tail(path):
    """(frames, leftover bytes) of a WAL file: its 32-byte header names the page size, and
    each frame is a 24-byte header plus one page. Leftover bytes are a torn frame."""
    with open(path, "rb") as f:
        data = f.read()
    fk.check(len(data) >= 32, "%s: %d bytes, no WAL header" % (path, len(data)))
    page_size = int.from_bytes(data[8:12], "big")
    frame = 24 + page_size
    return (len(data) - 32) // frame, (len(data) - 32) % frame


def test_index_wal_enospc_torn_tail():
    # An index commit's WAL append hits a full disk part-way through a frame (the shim cuts
    # the write short, then ENOSPC): the COMMIT fails after the batch was handed to the
    # WAL, so 504; failed state; SQLite's recovery at the restart ignores the torn frame
    # and everything acknowledged is there. A fresh store's startup appends 24,752 bytes
    # to the WAL and each of these commits 12,360 (3 frames of 4 KiB pages): 150,000 bytes
    # let about 10 writes through.
    st = fk.file_store()
    ks = robust.Keyspace("tail", nlocks=1, keys_per_lock=3)
    lock = ks.locks[0]
    history = fk.History()
    p = st.start(env=fault_env(FK_WRITE_FAIL_PATH=WAL, FK_WRITE_ENOSPC_AFTER=150000))
    p.wait_ready()
    failed = None
    with p.client() as c:
        for i in range(1, 200):
            r = put_op(history, c, ks.keys[i % 3], lock, i, robust.body_for("tail-%d" % i, 100 + i))
            fk.check(r is not None, "write %d: no reply" % i)
            if r.status >= 500:
                failed = (i, r)
                break
            fk.check(r.status in (200, 201), "write %d: %r" % (i, r))
    fk.check(failed is not None, "the WAL never filled up")
    i, r = failed
    fk.expect_error(r, 504, "outcome_unknown", "the write whose WAL append was cut short")
    fk.check(i > 5, "only %d writes before the WAL filled up" % (i - 1))
    fk.check("fk_fsync_fault: " in p.stderr_text() and os.strerror(errno.ENOSPC) in p.stderr_text(),
             "the shim logged no ENOSPC")
    p.wait_log(lambda o: o.get("level") == "error")
    expect_failed_state(p, "ENOSPC on the index's WAL")
    p.kill()
    frames, torn = wal_tail(os.path.join(st.root, WAL))
    fk.check(torn > 0, "the WAL should end in a torn frame (%d whole frames, nothing more)" % frames)
    p2 = st.start()
    p2.wait_ready()
    robust.verify(history, p2, ks, root=st.root)
    print("  %d writes acknowledged, write %d cut short in the WAL (%d frames + %d bytes): 504, "
          "the torn frame ignored on restart" % (i - 1, i, frames, torn))


def test_fsync_eio_under_load():
    st = fk.file_store()
    ks = robust.Keyspace("eiol", nlocks=3, keys_per_lock=2)
    tokens = robust.Tokens(ks.locks)
    history = fk.History()
    p = st.start(env=fault_env(FK_FSYNC_FAIL_AFTER=40 + int(time.time() * 1000) % 60))
    p.wait_ready()
    first_5xx = []

    def on_result(op, status, _lat):
        if status is not None and status >= 500 and not first_5xx:
            first_5xx.append(time.monotonic())

    load = robust.Load(lambda: p, history, ks, tokens, nthreads=6, sizes=(1, 8192),
                       timeout=10, on_result=on_result)
    load.start()
    deadline = time.monotonic() + 30
    while not first_5xx and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)   # keep loading the failed store
    load.stop()
    fk.check(first_5xx, "no 5xx within 30s of load with fsync failing (%s)" % history.summary())
    t_fail = first_5xx[0]
    after = [o for o in history.ops if o.invoke_t > t_fail]
    fk.check(len(after) > 10, "too few requests after the failure (%d)" % len(after))
    bad = [o for o in after if o.result != "fail" or not str(o.info).startswith("503")]
    fk.check(not bad, "requests sent after the first 5xx must get 503: %r" % bad[:5])
    expect_failed_state(p, "an fsync EIO under load")
    p.kill()
    p2 = st.start()
    p2.wait_ready()
    robust.verify(history, p2, ks, root=st.root)
    print("  %d ops %s; %d after the failure, all 503" % (len(history.ops), history.summary(), len(after)))


# --- full disk ------------------------------------------------------------------------

class SmallFs:
    """A small file system mounted on a fresh directory: tmpfs, or ext4 on a loop device."""

    def __init__(self, size_kib=2048):
        self.dir = tempfile.mkdtemp(prefix="fk-full-")
        self.kind = None
        self.image = None
        errs = []
        if os.environ.get("FK_DISK_FS") != "ext4":   # FK_DISK_FS=ext4 tries the fallback first
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk,mode=0755" % size_kib, "tmpfs",
                                self.dir], capture_output=True, text=True)
            if r.returncode == 0:
                self.kind = "tmpfs"
                return
            errs.append("tmpfs: " + r.stderr.strip())
        self.image = self.dir + ".img"
        try:
            with open(self.image, "wb") as f:
                f.truncate(size_kib * 1024 * 2)   # ext4 metadata takes its share
            subprocess.run(["mkfs.ext4", "-q", "-F", self.image], check=True, capture_output=True)
            r = subprocess.run(["mount", "-o", "loop", self.image, self.dir], capture_output=True, text=True)
            if r.returncode == 0:
                self.kind = "ext4"
                return
            errs.append("ext4 loop: " + r.stderr.strip())
        except (OSError, subprocess.CalledProcessError) as e:
            errs.append("ext4 loop: %s" % e)
        self.remove()
        raise fk.Skip("cannot mount a small file system here (%s); full-disk test not run"
                      % "; ".join(errs))

    def grow(self, size_kib):
        """More room; nothing may have files open on it (ext4 is unmounted to resize)."""
        if self.kind == "tmpfs":
            subprocess.run(["mount", "-o", "remount,size=%dk" % size_kib, self.dir], check=True)
            return
        subprocess.run(["umount", self.dir], check=True)
        with open(self.image, "r+b") as f:
            f.truncate(size_kib * 1024 * 2)
        subprocess.run(["e2fsck", "-fy", self.image], capture_output=True)
        subprocess.run(["resize2fs", self.image], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", self.image, self.dir], check=True)

    def remove(self):
        if self.kind:
            r = subprocess.run(["umount", self.dir], capture_output=True)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", self.dir], capture_output=True)
            self.kind = None
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)
        if self.image:
            with contextlib.suppress(OSError):
                os.unlink(self.image)


def test_full_disk():
    fs = SmallFs(2048)
    try:
        full_disk_checks(fs)
    finally:
        fk.kill_all_proxies()
        fs.remove()


def full_disk_checks(fs):
    root = os.path.join(fs.dir, "store")
    st = fk.Store("file", "file:" + root, root=root)
    lock = "full"
    history = fk.History()
    keys = []
    p = st.start()
    p.wait_ready()
    token = 0
    with p.client() as c:
        # 1. Big bodies until one does not fit.
        refused = None
        for i in range(100):
            token += 1
            key = "big/%d" % i
            keys.append(key)
            r = put_op(history, c, key, lock, token, robust.body_for("big-%d" % i, 150 * 1024))
            fk.check(r is not None, "no reply for %s: %r" % (key, history.ops[-1]))
            if r.status not in (200, 201):
                refused = r
                break
        fk.check(refused is not None, "a 2 MiB %s took 100 bodies of 150 KiB" % fs.kind)
        fk.expect_error(refused, 503, "unavailable", "a body that does not fit")
        fk.check(refused.header("Retry-After") is not None, "503 without Retry-After")
        stored = [o for o in history.ops if o.result == "ok"]
        fk.check(len(stored) >= 5, "only %d bodies fit" % len(stored))
        # 2. Still serving: ready, reads intact, a replacement that does not fit keeps the old body.
        fk.eq(c.readyz().status, 200, "/readyz after ENOSPC on a body (not a failed state)")
        for o in stored:
            g = c.get(o.key)
            fk.check(g.status == 200 and g.body == o.value, "read of %s after ENOSPC: %r" % (o.key, g))
        victim = stored[0]
        token += 1
        r = put_op(history, c, victim.key, lock, token, robust.body_for("big-replace", 600 * 1024))
        fk.expect_error(r, 503, "unavailable", "a replacement that does not fit")
        g = c.get(victim.key)
        fk.check(g.status == 200 and g.body == victim.value, "old body kept after a refused replacement")
        fk.eq(c.fence(lock).json()["token"], max(o.token for o in robust.acked(history)),
              "refused writes leave the fence alone")
        # 3. Deletes free space; a big write fits again without a restart.
        for o in stored[-3:]:
            token += 1
            op = history.invoke("seq", "delete", lock, o.key, token)
            history.record_response(op, c.delete(o.key, token=token, lock=lock))
            fk.eq(op.result, "ok", "delete of %s on a full disk" % o.key)
        token += 1
        r = put_op(history, c, "big/again", lock, token, robust.body_for("big-again", 150 * 1024))
        keys.append("big/again")
        fk.check(r is not None and r.status == 201, "a write after freeing space: %r" % r)
        # 4. Small writes (one page each) until anything at all fails.
        last = None
        for i in range(3000):
            token += 1
            key = "small/%d" % i
            keys.append(key)
            last = put_op(history, c, key, lock, token, robust.body_for("small-%d" % i, 100))
            if last is None or last.status not in (200, 201):
                break
        fk.check(last is None or last.status in (503, 504),
                 "the first write that found the disk full: %r" % last)
    ready = p.client().readyz().status
    print("  %s: %d big bodies fit, refused with 503; %d small writes then %s; /readyz %d"
          % (fs.kind, len(stored), i, last.status if last else "no reply", ready))
    # 5. Grow the file system, kill -9, restart: everything acknowledged is there, whole.
    p.kill()
    fs.grow(8192)
    p2 = st.start()
    p2.wait_ready()
    ks = robust.Keyspace("unused", nlocks=0)
    ks.key_lock = {k: lock for k in keys}
    ks.locks = [lock]
    robust.verify(history, p2, ks, root=root)
    p2.kill()


if __name__ == "__main__":
    fk.main(globals())
