#!/usr/bin/env python3
"""Markdown tables from a run of scripts/bench/index_engines.sh.

Usage: index_engines_report.py build-bench/index_engines.out build-bench/index_engines-samples

The .out file holds one `key=value` line per phase; the samples directory one file per
section, row count and configuration, with every batch latency ("b <us>") and read latency
("r <us>") of all its rounds, so that percentiles are taken over the pooled samples.
"""
import os, statistics, sys

rows = []
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    kv["kind"] = "env" if line.startswith("env ") else kv["phase"]
    rows.append(kv)

def pct(xs, p):
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))] if xs else 0.0

def samples(section, target, tag):
    b, r = [], []
    with open(os.path.join(sys.argv[2], f"{section}-{target}-{tag}")) as f:
        for line in f:
            k, v = line.split()
            (b if k == "b" else r).append(float(v))
    return sorted(b), sorted(r)

def table(head, body):
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for b in body:
        print("| " + " | ".join(str(x) for x in b) + " |")
    print()

def mib(v): return f"{int(v) / 1048576:.0f}"
def med(rs, k): return statistics.median(float(r[k]) for r in rs)

for r in rows:
    if r["kind"] == "env":
        print("- " + ", ".join(f"{k} {v}" for k, v in r.items() if k != "kind"))
print()

meas = [r for r in rows if r["kind"] == "measure"]
groups = {}
for r in meas:
    groups.setdefault((r["section"], r["target"], r["config"]), []).append(r)

def commit_rows(section):
    out = []
    for (sec, target, tag), rs in groups.items():
        if sec != section:
            continue
        b, rd = samples(sec, target, tag)
        wps = sorted(int(r["writes_per_s"]) for r in rs)
        out.append((target, tag, rs, b, rd, wps))
    out.sort(key=lambda x: (int(x[0]), x[1]))
    return out

def share_over(xs, us):
    return f"{100 * sum(x > us for x in xs) / len(xs):.2f}%"

print("Batch commits: writes/s (median of the rounds, range), batch latency from BEGIN to "
      "COMMIT returned in ms (all rounds' batches pooled)\n")
table(["rows", "engine", "rounds", "writes/s", "range", "p50", "p99", "p99.9", "max",
       "> 20 ms", "> 50 ms", "batches", "writer CPU µs/write", "process CPU µs/write",
       "written KiB/write", "WAL peak MiB"],
      [[t, tag, len(rs), int(statistics.median(w)), f"{w[0]}–{w[-1]}",
        f"{pct(b, .5) / 1000:.1f}", f"{pct(b, .99) / 1000:.1f}", f"{pct(b, .999) / 1000:.1f}",
        f"{b[-1] / 1000:.1f}", share_over(b, 20000), share_over(b, 50000), len(b), f'{med(rs, "writer_cpu_us_per_write"):.0f}',
        f'{med(rs, "process_cpu_us_per_write"):.0f}',
        f'{med(rs, "written_kib_per_write"):.1f}' if "written_kib_per_write" in rs[0] else "-",
        f'{max(float(r["wal_peak_mib"]) for r in rs):.0f}']
       for t, tag, rs, b, rd, w in commit_rows("sizes")])

print("Point reads during the writes in µs (pooled), peak memory of the process in MiB "
      "(highest of the rounds)\n")
table(["rows", "engine", "reads", "p50", "p99", "p99.9", "max", "VmRSS", "RssAnon", "RssFile"],
      [[t, tag, len(rd), f"{pct(rd, .5):.1f}", f"{pct(rd, .99):.1f}", f"{pct(rd, .999):.0f}",
        f"{rd[-1]:.0f}", f'{max(float(r["peak_rss_mib"]) for r in rs):.0f}',
        f'{max(float(r["peak_anon_mib"]) for r in rs):.0f}',
        f'{max(float(r["peak_file_mib"]) for r in rs):.0f}']
       for t, tag, rs, b, rd, w in commit_rows("sizes")])

print("SQLite checkpointer thread: background PASSIVE checkpoints, and the writer's "
      "catch-up checkpoints (ms; per round)\n")
table(["rows", "engine", "round", "bg ckpts", "bg p50", "bg max", "catch-ups", "catch-up p50",
       "catch-up max", "catch-up busy", "WAL peak MiB"],
      [[r["target"], r["config"], r["round"], r["bg_ckpts"], r["bg_ckpt_p50_ms"],
        r["bg_ckpt_max_ms"], r["catchup_ckpts"], r["catchup_ckpt_p50_ms"],
        r["catchup_ckpt_max_ms"], r["catchup_busy"], r["wal_peak_mib"]]
       for r in meas if "bg_ckpts" in r and r["section"] == "sizes"])

reo = [r for r in rows if r["kind"] == "reopen"]
print("Reopen after dropping the page cache: open, first fence read, first key read (ms); "
      "1,000 random reads (µs); RSS (anon/file) in MiB\n")
table(["rows", "engine", "open", "first fence", "first key", "reads p50", "p99", "max",
       "RSS after reads", "full scan s", "RSS after scan", "file MiB", "free pages"],
      [[r["rows"], r["engine"], r["open_ms"], r["first_fence_ms"], r["first_key_ms"],
        r["cold_p50_us"], r["cold_p99_us"], r["cold_max_us"],
        f'{r["after_reads_rss_mib"]} ({r["after_reads_anon_mib"]}/{r["after_reads_file_mib"]})',
        r.get("scan_s", "-"),
        f'{r["after_scan_rss_mib"]} ({r["after_scan_anon_mib"]}/{r["after_scan_file_mib"]})'
        if "scan_s" in r else "-",
        mib(r["db_bytes"]), f'{r["free_pages"]} of {r["page_count"]}'] for r in reo])

print("Deletes, then the same keys written again (SQLite sizes after a TRUNCATE checkpoint): "
      "file MiB and free pages\n")
table(["rows", "engine", "deleted", "per txn", "before", "after delete", "after re-write",
       "free pages before", "after delete", "after re-write", "delete s", "re-write s"],
      [[r["rows"], r["engine"], r["deleted"], r["txn"], mib(r["before_db_bytes"]),
        mib(r["deleted_db_bytes"]), mib(r["reinserted_db_bytes"]), r["before_free_pages"],
        r["deleted_free_pages"], r["reinserted_free_pages"], r["delete_s"], r["reinsert_s"]]
       for r in rows if r["kind"] == "churn"])

print("Name length: writes/s (median of the rounds), batch ms and read µs pooled\n")
table(["rows", "config", "name bytes", "page", "writes/s", "range", "p50", "p99", "p99.9",
       "max", "read p50", "read p99", "writer CPU µs/write", "file MiB", "collisions"],
      [[t, tag, rs[0]["name_len"], rs[-1].get("page_size", "4096"), int(statistics.median(w)),
        f"{w[0]}–{w[-1]}", f"{pct(b, .5) / 1000:.1f}", f"{pct(b, .99) / 1000:.1f}",
        f"{pct(b, .999) / 1000:.1f}", f"{b[-1] / 1000:.1f}", f"{pct(rd, .5):.1f}",
        f"{pct(rd, .99):.1f}", f'{med(rs, "writer_cpu_us_per_write"):.0f}',
        mib(rs[-1]["db_bytes"]), rs[-1]["collisions"]]
       for t, tag, rs, b, rd, w in commit_rows("names")])

print("Loads (not durable; 100,000 sorted-then-shuffled names per transaction)\n")
table(["section", "engine", "name bytes", "rows", "added", "s", "rows/s"],
      [[r["section"], r["config"], r["name_len"], r["rows"], r["added"], r["seconds"],
        r["rows_per_s"]] for r in rows if r["kind"] == "load"])
