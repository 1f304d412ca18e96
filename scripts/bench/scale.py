#!/usr/bin/env python3
"""Helpers of scripts/bench-scale.sh (also imported by tests/integration/test_file_scale.py).

usage:
  scale.py load   --url URL --mode put|delete --first I --count N --out DIR [--pid PID]
                  [--body-bytes 256] [--prefixes 1000] [--clients 32] [--threads 2]
                  [--segments 20] [--stall 120] [--data DIR]
      Runs wrk with scale.lua until it has an answer for every key, sampling fencekeeper
      (PID) every second; writes DIR/MODE-summary.json, MODE-curve.tsv (per second) and
      MODE-samples.tsv; prints the summary; exits 1 unless every key got the expected
      status (201 for put, 204 for delete) and every idle /healthz got 200.
  scale.py ready  --port P --pid PID --t0 EPOCH_SECONDS [--timeout 600] [--interval 0.01]
      Polls GET /readyz every INTERVAL until 200; prints JSON: seconds from T0 (taken by
      the caller right before it started the process) to the 200, and the process's
      VmRSS, VmHWM and /proc/PID/io right then.
  scale.py check  --port P --keys N [--prefixes 1000] [--body-bytes 256] [--sample 1000]
                  [--seed 1]
      Reads SAMPLE random keys of 0..N-1 and compares body, ETag, Content-Type,
      Fencing-Token and Fencing-Lock with what scale.lua wrote; a key past N must be 404;
      writes SAMPLE/10 new keys (N+1000000..) and reads them back, rewrites one key (200,
      version 2). Prints JSON; exits 1 on any difference.
  scale.py report --out DIR [--plot FILE.svg|.png]
      Reads DIR/{meta.tsv, put-*, delete-*, restart.json, check.json} and prints the
      report; writes DIR/results.json, and the plot with gnuplot.

Percentiles are nearest-rank over the exact per-request histograms (1 µs resolution):
the smallest latency L such that at least p% of the requests took at most L.
"""

import argparse
import http.client
import json
import math
import os
import random
import resource
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "scale.lua")
PERCENTILES = (50, 99, 99.9)


# --- what scale.lua writes -----------------------------------------------------------------

def key_of(i, prefixes):
    return "t%d/k%d" % (i % prefixes, i)


def body_of(key, body_bytes):
    head = (key + "\n").encode()
    if len(head) >= body_bytes:
        return head[:body_bytes]
    return head + b"x" * (body_bytes - len(head))


# --- histograms ------------------------------------------------------------------------------

def percentile(hist, p):
    """Nearest rank over {µs: count}; None when empty."""
    n = sum(hist.values())
    if n == 0:
        return None
    rank = max(1, math.ceil(p / 100.0 * n))
    seen = 0
    for us in sorted(hist):
        seen += hist[us]
        if seen >= rank:
            return us
    return max(hist)


def lat_summary(hist):
    """{"n", "p50_ms", "p99_ms", "p99.9_ms", "max_ms", "mean_ms"} of a histogram."""
    n = sum(hist.values())
    out = {"n": n}
    if n == 0:
        return out
    for p in PERCENTILES:
        out["p%g_ms" % p] = percentile(hist, p) / 1000.0
    out["max_ms"] = max(hist) / 1000.0
    out["mean_ms"] = sum(us * c for us, c in hist.items()) / n / 1000.0
    return out


def read_results(out, mode, threads):
    """Merges MODE-t.result of every thread: (whole-run histogram, per-segment
    histograms, statuses, idle, idle_bad, bad lines)."""
    whole, segs, statuses = {}, {}, {}
    idle = idle_bad = 0
    bad = []
    for t in range(threads):
        with open(os.path.join(out, "%s-%d.result" % (mode, t))) as f:
            for line in f:
                parts = line.split()
                if not parts:
                    continue
                if parts[0] == "lat":
                    seg, us, n = int(parts[1]), int(parts[2]), int(parts[3])
                    whole[us] = whole.get(us, 0) + n
                    h = segs.setdefault(seg, {})
                    h[us] = h.get(us, 0) + n
                elif parts[0] == "status":
                    statuses[parts[1]] = statuses.get(parts[1], 0) + int(parts[2])
                elif parts[0] == "idle":
                    idle += int(parts[1])
                elif parts[0] == "idle_bad":
                    idle_bad += int(parts[1])
                elif parts[0] == "bad":
                    bad.append(line[4:].rstrip("\n"))
    return whole, segs, statuses, idle, idle_bad, bad


def read_progress(out, mode, threads):
    """Per thread: a list of (unix time, answers so far, slowest µs in the interval)."""
    res = []
    for t in range(threads):
        rows = []
        path = os.path.join(out, "%s-%d.progress" % (mode, t))
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3:
                        rows.append((float(parts[0]), int(parts[1]), int(parts[2])))
        res.append(rows)
    return res


def interp(rows, t, t_start):
    """A thread's answers at time t, linear between its progress lines (0 at t_start)."""
    prev_t, prev_n = t_start, 0
    for rt, n, _ in rows:
        if rt >= t:
            if rt == prev_t:
                return n
            return prev_n + (n - prev_n) * (t - prev_t) / (rt - prev_t)
        prev_t, prev_n = rt, n
    return prev_n


# --- /proc -----------------------------------------------------------------------------------

def proc_status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def proc_io(pid):
    out = {}
    try:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k.strip()] = int(v)
    except OSError:
        pass
    return out


def fs_used(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree


# --- load --------------------------------------------------------------------------------------

def load(url, mode, first, count, out, pid=None, body_bytes=256, prefixes=1000, clients=32,
         threads=2, segments=20, stall=120.0, data=None, log=None):
    """Runs scale.lua through wrk; returns the summary dict (also written to
    OUT/MODE-summary.json). Raises RuntimeError when wrk stalls or fails."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    threads = max(1, min(threads, clients))
    if count < threads:
        raise ValueError("need at least %d keys (one per wrk thread)" % threads)
    os.makedirs(out, exist_ok=True)
    for t in range(threads):
        for ext in ("progress", "result", "result.tmp"):
            p = os.path.join(out, "%s-%d.%s" % (mode, t, ext))
            if os.path.exists(p):
                os.remove(p)
    samples_path = os.path.join(out, "%s-samples.tsv" % mode)
    samples = open(samples_path, "w")
    samples.write("t\tvm_rss_kib\tvm_hwm_kib\tfs_used_bytes\tfs_used_inodes\tread_bytes\twrite_bytes\n")
    fs_path = data or out

    def sample(t0):
        st = proc_status(pid) if pid else {}
        io = proc_io(pid) if pid else {}
        used, inodes = fs_used(fs_path)
        samples.write("%.3f\t%s\t%s\t%d\t%d\t%s\t%s\n" % (
            time.time() - t0, st.get("VmRSS", ""), st.get("VmHWM", ""), used, inodes,
            io.get("read_bytes", ""), io.get("write_bytes", "")))
        samples.flush()

    # wrk runs for a duration: one far longer than any run; scale.lua ends it (os.exit)
    # when every key has its answer, and the stall check below ends a run that hangs.
    cmd = ["wrk", "-t%d" % threads, "-c%d" % clients, "-d86400s", "--timeout", "60s",
           "-s", LUA, url, "--", mode, str(first), str(count), str(body_bytes), str(prefixes),
           str(threads), os.path.abspath(out), str(segments)]
    wrk_log = open(os.path.join(out, "%s-wrk.log" % mode), "w")
    t_start = time.time()
    sample(t_start)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=wrk_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    last_total, last_change, next_log = -1, time.monotonic(), time.monotonic() + 10
    failure = None
    try:
        while True:
            try:
                proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            sample(t_start)
            total = sum(rows[-1][1] if rows else 0 for rows in read_progress(out, mode, threads))
            now = time.monotonic()
            if total != last_total:
                last_total, last_change = total, now
            elif now - last_change > stall:
                failure = ("no answer for %.0f s after %d of %d keys (a lost request or a "
                           "hung server); wrk stopped" % (stall, total, count))
                break
            if now >= next_log:
                log("   %s: %d of %d keys (%.0f s)" % (mode, total, count, time.time() - t_start))
                next_log = now + 10
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait()
    t_end = time.time()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    sample(t_start)
    samples.close()
    wrk_log.close()
    if failure is None and proc.returncode != 0:
        failure = "wrk exited with %s (see %s-wrk.log)" % (proc.returncode, mode)
    missing = [t for t in range(threads)
               if not os.path.exists(os.path.join(out, "%s-%d.result" % (mode, t)))]
    if failure is None and missing:
        failure = "wrk ended before threads %s had all their answers" % missing
    if failure:
        raise RuntimeError("%s %s: %s" % (mode, url, failure))

    whole, segs, statuses, idle, idle_bad, bad = read_results(out, mode, threads)
    progress = read_progress(out, mode, threads)
    # The time of the last answer (the last progress line of the slowest thread), not
    # wrk's exit, ends the run.
    t_last = max(rows[-1][0] for rows in progress if rows) if any(progress) else t_end
    seconds = max(t_last - t_start, 1e-6)
    answers = sum(whole.values())
    expect = "201" if mode == "put" else "204"
    summary = {
        "mode": mode, "first": first, "count": count, "clients": clients, "threads": threads,
        "body_bytes": body_bytes, "prefixes": prefixes, "segments": segments,
        "start_unix": t_start, "seconds": seconds, "answers": answers,
        "rate": answers / seconds, "statuses": statuses,
        "unexpected": answers - statuses.get(expect, 0), "expected_status": int(expect),
        "idle_requests": idle, "idle_not_200": idle_bad, "bad_examples": bad,
        "latency": lat_summary(whole),
        "wrk_cpu_us_per_request": ((ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime)
                                   * 1e6 / max(answers + idle, 1)),
    }
    # Per segment: answers count/segments ... of them, the time the store crossed each
    # boundary (sum over threads, linear between progress lines), and the latencies of
    # the segment's answers (a thread files its n-th answer of Q under segment
    # floor(n*segments/Q), so the segments of the threads line up to within the threads'
    # difference in progress).
    def keys_at(t):
        return sum(interp(rows, t, t_start) for rows in progress)

    def time_at(k):
        lo, hi = t_start, t_last
        for _ in range(60):
            mid = (lo + hi) / 2
            if keys_at(mid) < k:
                lo = mid
            else:
                hi = mid
        return hi

    bounds = [0.0] + [time_at(count * (j + 1) / segments) - t_start for j in range(segments)]
    summary["segment_table"] = []
    for j in range(segments):
        dt = max(bounds[j + 1] - bounds[j], 1e-6)
        row = {"segment": j, "keys_before": round(count * j / segments),
               "keys_after": round(count * (j + 1) / segments),
               "t_end": bounds[j + 1], "rate": count / segments / dt}
        row.update({"latency": lat_summary(segs.get(j, {}))})
        summary["segment_table"].append(row)
    # Per second: keys answered so far and the slowest answer in that second.
    curve_path = os.path.join(out, "%s-curve.tsv" % mode)
    with open(curve_path, "w") as f:
        f.write("t\tkeys\trate\tmax_ms\n")
        prev = 0.0
        steps = int(math.ceil(seconds))
        for s in range(1, steps + 1):
            t = t_start + min(s, seconds)
            k = keys_at(t)
            dt = min(s, seconds) - (s - 1)
            worst = max([m for rows in progress for (rt, _, m) in rows
                         if t - dt < rt <= t] or [0])
            f.write("%.3f\t%.0f\t%.0f\t%.3f\n" % (min(s, seconds), k, (k - prev) / dt, worst / 1000.0))
            prev = k
    with open(os.path.join(out, "%s-summary.json" % mode), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "%s-latency.tsv" % mode), "w") as f:
        f.write("us\tcount\n")
        for us in sorted(whole):
            f.write("%d\t%d\n" % (us, whole[us]))
    return summary


# --- ready -------------------------------------------------------------------------------------

def http_get(port, path, timeout=2.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def wait_ready(port, pid, t0, timeout=600.0, interval=0.01):
    """Polls /readyz; returns {"seconds", "rss_kib", "hwm_kib", "io"} at the first 200."""
    deadline = time.time() + timeout
    while True:
        try:
            status, _ = http_get(port, "/readyz")
        except OSError:
            status = None
        if status == 200:
            t = time.time()
            st, io = proc_status(pid), proc_io(pid)
            return {"seconds": t - t0, "rss_kib": st.get("VmRSS"), "hwm_kib": st.get("VmHWM"),
                    "io": io}
        if not os.path.exists("/proc/%d" % pid):
            raise RuntimeError("fencekeeper (pid %d) exited before /readyz answered 200" % pid)
        if time.time() > deadline:
            raise RuntimeError("/readyz did not answer 200 within %.0f s" % timeout)
        time.sleep(interval)


# --- check -------------------------------------------------------------------------------------

class Checker:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def request(self, method, path, body=None, headers=None):
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()

    def close(self):
        self.conn.close()


def check_store(port, keys, prefixes=1000, body_bytes=256, sample=1000, seed=1, rewrite=True):
    """Returns {"read", "written", "problems": [...]}: an empty list means every check held."""
    rng = random.Random(seed)
    c = Checker(port)
    problems = []

    def expect_key(i, version):
        key = key_of(i, prefixes)
        status, h, body = c.request("GET", "/v1/resources/" + key)
        want = {"status": 200, "body": body_of(key, body_bytes), "etag": '"%d"' % version,
                "content-type": "application/octet-stream", "fencing-token": "1",
                "fencing-lock": key}
        got = {"status": status, "body": body, "etag": h.get("etag"),
               "content-type": h.get("content-type"), "fencing-token": h.get("fencing-token"),
               "fencing-lock": h.get("fencing-lock")}
        for k in want:
            if got[k] != want[k]:
                problems.append("GET %s: %s is %r, expected %r" % (key, k, got[k], want[k]))

    try:
        picks = rng.sample(range(keys), min(sample, keys))
        for i in picks:
            expect_key(i, 1)
        absent = key_of(keys + 5000000, prefixes)
        status, _, _ = c.request("GET", "/v1/resources/" + absent)
        if status != 404:
            problems.append("GET %s (never written): %d, expected 404" % (absent, status))
        fresh = [keys + 1000000 + j for j in range(max(1, sample // 10))]
        for i in fresh:
            key = key_of(i, prefixes)
            status, _, body = c.request("PUT", "/v1/resources/" + key, body=body_of(key, body_bytes),
                                        headers={"Fencing-Token": "1", "Fencing-Lock": key,
                                                 "Content-Type": "application/octet-stream"})
            if status != 201:
                problems.append("PUT %s: %d %r, expected 201" % (key, status, body[:200]))
        for i in fresh:
            expect_key(i, 1)
        if rewrite:
            i = picks[0]
            key = key_of(i, prefixes)
            status, h, body = c.request("PUT", "/v1/resources/" + key, body=body_of(key, body_bytes),
                                        headers={"Fencing-Token": "1", "Fencing-Lock": key,
                                                 "Content-Type": "application/octet-stream"})
            if status != 200 or h.get("etag") != '"2"':
                problems.append("PUT %s again: %d ETag %s, expected 200 ETag \"2\""
                                % (key, status, h.get("etag")))
            else:
                expect_key(i, 2)
    finally:
        c.close()
    return {"read": len(picks), "written": len(fresh) + (1 if rewrite else 0),
            "problems": problems}


# --- report ------------------------------------------------------------------------------------

def read_kv(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if "\t" in line:
                    k, v = line.rstrip("\n").split("\t", 1)
                    out[k] = v
    return out


def read_json(path):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return None


def read_samples(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            header = f.readline().rstrip("\n").split("\t")
            for line in f:
                vals = line.rstrip("\n").split("\t")
                rows.append({k: (float(v) if v else None) for k, v in zip(header, vals)})
    return rows


def sample_at(rows, t, field):
    """The value of `field` in the sample closest to time t."""
    best = None
    for r in rows:
        if r.get(field) is None:
            continue
        if best is None or abs(r["t"] - t) < abs(best["t"] - t):
            best = r
    return best[field] if best else None


def mib(kib):
    return "—" if kib in (None, "") else "%.0f" % (float(kib) / 1024)


def gib(b):
    return "—" if b in (None, "") else "%.2f" % (float(b) / 2**30)


def ms(x):
    return "—" if x is None else ("%.1f" % x if x >= 10 else "%.2f" % x)


def report(out, plot=None):
    meta = read_kv(os.path.join(out, "meta.tsv"))
    put = read_json(os.path.join(out, "put-summary.json"))
    dele = read_json(os.path.join(out, "delete-summary.json"))
    restart = read_json(os.path.join(out, "restart.json"))
    check = read_json(os.path.join(out, "check.json"))
    samples = read_samples(os.path.join(out, "put-samples.tsv"))
    lines = []
    p = lines.append
    p("## fencekeeper file store at scale")
    p("")
    for k in ("command", "date", "binary", "commit", "machine", "disk", "load", "params"):
        if k in meta:
            p("- %s: %s" % (k, meta[k]))
    p("")
    if put:
        p("### Writing %s keys (%d clients, %d-byte bodies, %d prefixes)"
          % (format(put["count"], ","), put["clients"], put["body_bytes"], put["prefixes"]))
        p("")
        p("| keys in store | writes/s in segment | p50 ms | p99 ms | p99.9 ms | max ms | RSS MiB | peak RSS MiB |")
        p("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for row in put["segment_table"]:
            lat = row["latency"]
            p("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                format(row["keys_after"], ","), format(round(row["rate"]), ","),
                ms(lat.get("p50_ms")), ms(lat.get("p99_ms")), ms(lat.get("p99.9_ms")),
                ms(lat.get("max_ms")), mib(sample_at(samples, row["t_end"], "vm_rss_kib")),
                mib(sample_at(samples, row["t_end"], "vm_hwm_kib"))))
        lat = put["latency"]
        p("")
        p("Whole run: %s keys in %.1f s = **%s writes/s**; latency over every request: "
          "p50 **%s ms**, p99 **%s ms**, p99.9 **%s ms**, max **%s ms** (mean %s ms); "
          "statuses %s%s." % (
              format(put["answers"], ","), put["seconds"], format(round(put["rate"]), ","),
              ms(lat.get("p50_ms")), ms(lat.get("p99_ms")), ms(lat.get("p99.9_ms")),
              ms(lat.get("max_ms")), ms(lat.get("mean_ms")),
              ", ".join("%s×%s" % (v, k) for k, v in sorted(put["statuses"].items())),
              "" if put["unexpected"] == 0 else " — **%d UNEXPECTED**" % put["unexpected"]))
        p("")
    rows = [
        ("RSS after writing", mib(meta.get("after_write_rss_kib")) + " MiB"),
        ("peak RSS while writing (VmHWM)", mib(meta.get("after_write_hwm_kib")) + " MiB"),
        ("disk use of the data dir after writing (du)",
         "%s GiB, %s inodes" % (gib(meta.get("after_write_du_bytes")),
                                format(int(meta["after_write_du_inodes"]), ",")
                                if meta.get("after_write_du_inodes") else "—")),
        ("file system use growth while writing (df; others share the disk)",
         "%s GiB, %s inodes" % (gib(meta.get("after_write_df_bytes")),
                                format(int(meta["after_write_df_inodes"]), ",")
                                if meta.get("after_write_df_inodes") else "—")),
        ("SIGTERM to exit", "%s s" % meta.get("stop_seconds", "—")),
    ]
    if restart:
        io = restart.get("io", {})
        rows += [
            ("restart to /readyz 200 (%s page cache)" % meta.get("page_cache", "?"),
             "**%.3f s**" % restart["seconds"]),
            ("RSS right after ready / peak during start",
             "%s / %s MiB" % (mib(restart.get("rss_kib")), mib(restart.get("hwm_kib")))),
            ("read during start (rchar / syscr / read_bytes)",
             "%s MiB / %s calls / %s MiB" % (
                 mib(io.get("rchar", 0) / 1024), format(io.get("syscr", 0), ","),
                 mib(io.get("read_bytes", 0) / 1024))),
        ]
    for how, what in (("term", "SIGTERM"), ("kill", "kill -9")):
        again = read_json(os.path.join(out, "restart-load-%s.json" % how))
        if not again or "load_%s_writes" % how not in meta:
            continue
        rows.append((
            "restart after %s under load (%s fresh-key writes before it, one busy core; "
            "%s page cache)" % (what, format(int(meta["load_%s_writes" % how]), ","),
                                meta.get("load_%s_page_cache" % how, "?")),
            "**%.3f s**, %s redo rows at start; the stop took %s s" % (
                again["seconds"], meta.get("load_%s_redo_rows" % how, "?"),
                meta.get("load_%s_stop_seconds" % how, "?"))))
    if check:
        rows.append(("read/write check after restart",
                     "%d keys read, %d written: %s" % (
                         check["read"], check["written"],
                         "all correct" if not check["problems"] else
                         "**%d PROBLEMS**" % len(check["problems"]))))
        rows.append(("RSS after the check", mib(meta.get("after_check_rss_kib")) + " MiB"))
    if dele:
        lat = dele["latency"]
        rows += [
            ("deleting %s keys" % format(dele["count"], ","),
             "%s deletes/s; p50 %s, p99 %s, p99.9 %s, max %s ms%s" % (
                 format(round(dele["rate"]), ","), ms(lat.get("p50_ms")), ms(lat.get("p99_ms")),
                 ms(lat.get("p99.9_ms")), ms(lat.get("max_ms")),
                 "" if dele["unexpected"] == 0 else " — **%d UNEXPECTED**" % dele["unexpected"])),
            ("disk use after deleting (du)",
             "%s GiB, %s inodes" % (gib(meta.get("after_delete_du_bytes")),
                                    format(int(meta["after_delete_du_inodes"]), ",")
                                    if meta.get("after_delete_du_inodes") else "—")),
            ("RSS after deleting / peak", "%s / %s MiB" % (mib(meta.get("after_delete_rss_kib")),
                                                           mib(meta.get("after_delete_hwm_kib")))),
        ]
    p("| | |")
    p("|---|---|")
    for k, v in rows:
        p("| %s | %s |" % (k, v))
    problems = [l for l in meta.get("problems", "").split(" | ") if l]
    if check:
        problems += check["problems"][:20]
    if put and put["unexpected"]:
        problems += ["put: %s" % b for b in put["bad_examples"]]
    if dele and dele["unexpected"]:
        problems += ["delete: %s" % b for b in dele["bad_examples"]]
    if problems:
        p("")
        p("Problems:")
        for x in problems:
            p("- %s" % x)
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    results = {"meta": meta, "put": put, "delete": dele, "restart": restart, "check": check,
               "restart_after_load": {how: read_json(os.path.join(out, "restart-load-%s.json" % how))
                                      for how in ("term", "kill")}}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    if plot and put:
        make_plot(out, put, plot)
    return 1 if problems else 0


def make_plot(out, put, plot):
    """Writes PLOT (.svg or .png): writes/s per second and per segment, and RSS, against
    the keys in the store."""
    curve = read_samples(os.path.join(out, "put-curve.tsv"))
    samples = read_samples(os.path.join(out, "put-samples.tsv"))
    data = os.path.join(out, "plot-data.tsv")
    with open(data, "w") as f:
        for r in curve:
            f.write("%.0f\t%.0f\n" % (r["keys"], r["rate"]))
        f.write("\n\n")
        for row in put["segment_table"]:
            f.write("%d\t%.0f\n%d\t%.0f\n" % (row["keys_before"], row["rate"],
                                             row["keys_after"], row["rate"]))
        f.write("\n\n")
        for s in samples:
            if s.get("vm_rss_kib") is None:
                continue
            keys = 0
            for r in curve:   # keys in store at the sample's time
                if r["t"] <= s["t"]:
                    keys = r["keys"]
            f.write("%.0f\t%.1f\t%.1f\n" % (keys, s["vm_rss_kib"] / 1024, s["vm_hwm_kib"] / 1024))
    ext = os.path.splitext(plot)[1].lower()
    term = ("svg size 900,500 dynamic font 'sans,12'" if ext == ".svg"
            else "png size 900,500 font 'sans,10'")
    lat = put["latency"]
    title = ("%s keys, %d clients, %d-byte bodies: %s writes/s overall, p99.9 %s ms, max %s ms"
             % (format(put["count"], ","), put["clients"], put["body_bytes"],
                format(round(put["rate"]), ","), ms(lat.get("p99.9_ms")), ms(lat.get("max_ms"))))
    script = """
set terminal %s
set output '%s'
set title "%s"
set xlabel 'keys in store'
set ylabel 'writes/s'
set y2label 'RSS (MiB)'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set format x '%%.1s%%c'
set key outside bottom center horizontal
set grid ytics
plot '%s' index 0 using 1:2 with lines lc rgb '#9ecae1' title 'writes/s (per second)', \\
     '' index 1 using 1:2 with lines lw 2 lc rgb '#08519c' title 'writes/s (per segment)', \\
     '' index 2 using 1:2 axes x1y2 with lines lw 2 lc rgb '#d94801' title 'RSS', \\
     '' index 2 using 1:3 axes x1y2 with lines dt 2 lc rgb '#d94801' title 'peak RSS'
""" % (term, os.path.abspath(plot), title.replace('"', "'"), data)
    subprocess.run(["gnuplot"], input=script.encode(), check=True)


# --- command line -----------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("load")
    a.add_argument("--url", required=True)
    a.add_argument("--mode", choices=("put", "delete"), required=True)
    a.add_argument("--first", type=int, default=0)
    a.add_argument("--count", type=int, required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--pid", type=int)
    a.add_argument("--body-bytes", type=int, default=256)
    a.add_argument("--prefixes", type=int, default=1000)
    a.add_argument("--clients", type=int, default=32)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--segments", type=int, default=20)
    a.add_argument("--stall", type=float, default=120)
    a.add_argument("--data")
    a = sub.add_parser("ready")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--pid", type=int, required=True)
    a.add_argument("--t0", type=float, required=True)
    a.add_argument("--timeout", type=float, default=600)
    a.add_argument("--interval", type=float, default=0.01)
    a = sub.add_parser("check")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--keys", type=int, required=True)
    a.add_argument("--prefixes", type=int, default=1000)
    a.add_argument("--body-bytes", type=int, default=256)
    a.add_argument("--sample", type=int, default=1000)
    a.add_argument("--seed", type=int, default=1)
    a = sub.add_parser("report")
    a.add_argument("--out", required=True)
    a.add_argument("--plot")
    args = ap.parse_args()

    if args.cmd == "load":
        try:
            s = load(args.url, args.mode, args.first, args.count, args.out, args.pid,
                     args.body_bytes, args.prefixes, args.clients, args.threads, args.segments,
                     args.stall, args.data)
        except (RuntimeError, ValueError) as e:
            print("scale.py: %s" % e, file=sys.stderr)
            return 1
        lat = s["latency"]
        print("%s: %d answers in %.1f s (%.0f/s), statuses %s, idle %d (%d not 200); "
              "p50 %s p99 %s p99.9 %s max %s ms" % (
                  s["mode"], s["answers"], s["seconds"], s["rate"], s["statuses"],
                  s["idle_requests"], s["idle_not_200"], ms(lat.get("p50_ms")),
                  ms(lat.get("p99_ms")), ms(lat.get("p99.9_ms")), ms(lat.get("max_ms"))))
        for b in s["bad_examples"]:
            print("   unexpected answer: %s" % b)
        return 0 if s["unexpected"] == 0 and s["idle_not_200"] == 0 else 1
    if args.cmd == "ready":
        try:
            r = wait_ready(args.port, args.pid, args.t0, args.timeout, args.interval)
        except RuntimeError as e:
            print("scale.py: %s" % e, file=sys.stderr)
            return 1
        print(json.dumps(r))
        return 0
    if args.cmd == "check":
        r = check_store(args.port, args.keys, args.prefixes, args.body_bytes, args.sample, args.seed)
        print(json.dumps(r))
        return 1 if r["problems"] else 0
    if args.cmd == "report":
        return report(args.out, args.plot)
    return 2


if __name__ == "__main__":
    sys.exit(main())
