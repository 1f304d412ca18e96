#!/usr/bin/env python3
"""The file store at scale, the small check of issue 31 that runs with the suite (the full
10M-key measurement is scripts/bench-scale.sh).

Writes FK_SCALE_KEYS keys (default 200,000) of 256 bytes through the real binary, 32
connections, with wrk and scripts/bench/scale.lua (the benchmark's own load: key i is
t<i mod 1000>/k<i>, lock = key, token 1), stops it with SIGTERM, starts it again on the
same directory and checks:
  - every write answered 201;
  - peak RSS while writing, RSS once ready again, and peak RSS from the restart through
    the read-back: each at most 256 MiB (the issue's bound for 10M keys; not checked
    under AddressSanitizer, whose quarantine and shadow memory are not fencekeeper's);
  - no full scan at start: what the restarted process read before /readyz answered 200
    (/proc/PID/io rchar and syscr) is bounded by constants that do not grow with the
    keys (see START_READ_BYTES and START_READ_CALLS);
  - the store answers correctly after the restart: sampled keys' bodies, ETag (version
    1), Content-Type, Fencing-Token and Fencing-Lock; a never-written key is 404; new keys
    can be written and read back; a rewrite makes version 2.
It prints, and does not check, the write rate, latency percentiles and the time from the
exec to /readyz 200 (with whatever page cache the machine has): timings are the
benchmark's business.

The store of main at 143490e (journal replayed into memory at start) fails the scan check:
at 200,000 keys its start read 116 MiB in 401,000 read calls (every journal record and
every body).

    FENCEKEEPER_BIN=build/fencekeeper FK_SCALE_KEYS=50000 python3 tests/integration/test_file_scale.py
"""

import os
import sys
import time

import fk
from fk import check, eq

sys.path.insert(0, os.path.join(fk.REPO, "scripts", "bench"))
import scale  # noqa: E402  (scripts/bench/scale.py: the benchmark's load and checks)

KEYS = int(os.environ.get("FK_SCALE_KEYS") or 200000)
BODY_BYTES = 256
PREFIXES = 1000
CLIENTS = 32
RSS_LIMIT_KIB = 256 * 1024

# A store that opens its index and reads only its header and a few pages before it is
# ready reads far less than 8 MiB, in far fewer than 10,000 read calls, however many keys
# it holds: SQLite reads its 100-byte header, the schema and a few B-tree pages (4 KiB each);
# a WAL left over from an unclean stop is at most wal_autocheckpoint's 1,000 pages (~4 MiB)
# unless checkpoints were starved; the dynamic loader reads each library's ELF header. One
# that replays a journal or reads every key's metadata or body reads in proportion to
# the keys: at 200,000 keys, 42 bytes per key, or one read call per 20 keys, is over.
# Not counted (rchar and syscr count read(2)-family calls only): directory listings
# (getdents64) and memory-mapped reads.
START_READ_BYTES = 8 * 1024 * 1024
START_READ_CALLS = 10000


def status_kib(pid, field):
    v = scale.proc_status(pid).get(field)
    check(v is not None, "no %s for pid %d" % (field, pid))
    return v


def mib(kib):
    return "%.0f MiB" % (kib / 1024)


def test_file_store_scale():
    fk.require_tool("wrk")
    store = fk.file_store()
    p = store.start()
    p.wait_ready()
    asan = fk.under_asan(p.pid)

    out = fk.tmpdir("scale")
    t = time.monotonic()
    s = scale.load("http://127.0.0.1:%d" % p.port, "put", 0, KEYS, out, pid=p.pid,
                   body_bytes=BODY_BYTES, prefixes=PREFIXES, clients=CLIENTS, threads=2,
                   segments=1, stall=60, data=store.root, log=lambda msg: print(msg, flush=True))
    lat = s["latency"]
    print("   wrote %d keys in %.1f s: %.0f writes/s, p50 %.2f p99 %.2f p99.9 %.2f max %.2f ms"
          % (s["answers"], time.monotonic() - t, s["rate"], lat["p50_ms"], lat["p99_ms"],
             lat["p99.9_ms"], lat["max_ms"]), flush=True)
    eq(s["answers"], KEYS, "answers to the writes")
    eq(s["statuses"], {"201": KEYS}, "statuses of the writes (examples: %s)" % s["bad_examples"])
    eq(s["idle_not_200"], 0, "idle /healthz requests not answered 200")
    hwm_write = status_kib(p.pid, "VmHWM")

    eq(p.stop(), 0, "exit code on SIGTERM")
    # A store that reads everything before it listens takes its time: it is to fail the
    # checks below, not a start timeout.
    p.start_timeout = 600
    t0 = time.time()
    p.start()
    ready = scale.wait_ready(p.port, p.pid, t0, timeout=600)
    io = ready["io"]
    print("   restart to /readyz 200: %.3f s (page cache as it was); RSS %s, peak %s; read "
          "during start: rchar %d bytes, syscr %d, read_bytes %d"
          % (ready["seconds"], mib(ready["rss_kib"]), mib(ready["hwm_kib"]), io["rchar"],
             io["syscr"], io["read_bytes"]), flush=True)

    result = scale.check_store(p.port, KEYS, prefixes=PREFIXES, body_bytes=BODY_BYTES,
                               sample=500, seed=KEYS)
    eq(result["problems"], [], "the store after the restart")
    hwm_restart = status_kib(p.pid, "VmHWM")
    print("   peak RSS while writing %s; after the restart: RSS when ready %s, peak through "
          "the read-back %s%s" % (mib(hwm_write), mib(ready["rss_kib"]), mib(hwm_restart),
                                  " (AddressSanitizer: not checked)" if asan else ""), flush=True)

    problems = []
    if io["rchar"] > START_READ_BYTES or io["syscr"] > START_READ_CALLS:
        problems.append("the restart read %d bytes in %d calls before it was ready (at most %d "
                        "and %d: a start that reads every key reads in proportion to the keys)"
                        % (io["rchar"], io["syscr"], START_READ_BYTES, START_READ_CALLS))
    if not asan:
        for what, kib in (("peak RSS while writing", hwm_write),
                          ("RSS right after the restart", ready["rss_kib"]),
                          ("peak RSS from the restart through the read-back", hwm_restart)):
            if kib > RSS_LIMIT_KIB:
                problems.append("%s: %s, over %s" % (what, mib(kib), mib(RSS_LIMIT_KIB)))
    check(not problems, "; ".join(problems))
    eq(p.stop(), 0, "exit code on SIGTERM")


if __name__ == "__main__":
    fk.main(globals())
