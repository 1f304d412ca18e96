"""The verdicts of scripts/bench/report.py, on synthetic results (no services, no bench run).

Each case writes a results directory the way scripts/bench.sh does (results.tsv,
ceiling.tsv, meta.tsv), runs `report.py DIR 0` and reads the report it wrote. The rule
under test (docs/benchmarks.md, "Targets"): a round whose baseline collapsed is not a
measurement; it is left out of the ratio, and a target with no other round is INVALID,
never PASS.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
REPORT = os.path.join(REPO, "scripts", "bench", "report.py")

# Medians of the full run in docs/benchmarks.md at 7037872 (fencekeeper, baseline) per
# scenario and client count: a normal run, whose baselines differ a lot across client
# counts (F's at 128 is 40% of its rate at 32) without having collapsed.
NORMAL = {
    "P": {8: (6820, 8381), 32: (18451, 10911), 128: (29488, 9546)},
    "F": {8: (8038, 7431), 32: (14759, 11443), 128: (20132, 4543)},
    "S": {8: (76092, 106959), 32: (100273, 169511), 128: (108026, 213720)},
    "H": {8: (114212, 131132), 32: (146033, 218806), 128: (163879, 208470)},
}
# P's batch ceiling of that run: clients -> (writes/s of the batch statement alone, batch).
NORMAL_CEILING = {32: (20076, 16), 128: (40666, 60)}


def write_results(d, rows, ceiling=(), idem=(), txn=(), create=(), mix=(), meta=()):
    """rows: (scenario, clients, round, side, rate); ceiling: (clients, round, batch, rate);
    idem: (store, clients, round, mode, rate)."""
    with open(os.path.join(d, "results.tsv"), "w") as f:
        f.write("scenario\tclients\tround\tside\trate\tcpu_us_per_req\tdb_cpu_us_per_req\n")
        for scen, c, rnd, side, rate in rows:
            f.write("%s\t%d\t%d\t%s\t%.1f\t10.0\t\n" % (scen, c, rnd, side, rate))
    with open(os.path.join(d, "ceiling.tsv"), "w") as f:
        f.write("clients\tround\tfk_batch_mean\tbatch\trate\tdb_cpu_us_per_write\n")
        for c, rnd, batch, rate in ceiling:
            f.write("%d\t%d\t%.2f\t%d\t%.1f\t20.0\n" % (c, rnd, batch, batch, rate))
    if idem:
        with open(os.path.join(d, "idem.tsv"), "w") as f:
            f.write("store\tclients\tround\tmode\trate\tcpu_us_per_req\trequests\tnon2xx\tapplied\treplayed\n")
            for st, c, rnd, mode, rate in idem:
                f.write("%s\t%d\t%d\t%s\t%.1f\t12.0\t1000\t0\t1000\t0\n" % (st, c, rnd, mode, rate))
    if txn:
        with open(os.path.join(d, "txn.tsv"), "w") as f:
            f.write("store\tclients\tround\tmode\trate\tcpu_us_per_req\trequests\tnon2xx\n")
            for st, c, rnd, mode, rate in txn:
                f.write("%s\t%d\t%d\t%s\t%.1f\t30.0\t1000\t0\n" % (st, c, rnd, mode, rate))
    if mix:
        with open(os.path.join(d, "mix.tsv"), "w") as f:
            f.write("round\tside\tput_rate\ttxn_rate\tbatches\ttxns\twal_syncs\tnon2xx\t"
                    "txns_with_puts\n")
            for rnd, side, batches, txns, wal, *shared in mix:
                f.write("%d\t%s\t5000.0\t%.1f\t%d\t%d\t%d\t0\t%s\n"
                        % (rnd, side, txns / 10.0, batches, txns, wal, (shared or [""])[0]))
    if create:
        with open(os.path.join(d, "create.tsv"), "w") as f:
            f.write("store\tround\tus_per_file\n")
            for st, rnd, us in create:
                f.write("%s\t%d\t%.1f\n" % (st, rnd, us))
    with open(os.path.join(d, "meta.tsv"), "w") as f:
        f.write("command\tbash scripts/bench.sh --quick\nrounds\t1\nduration\t3\n")
        for k, v in meta:
            f.write("%s\t%s\n" % (k, v))


def normal_rows(rounds=1, scens="PFSH"):
    return [(s, c, r, side, rate)
            for s in scens for c, (fk, base) in NORMAL[s].items() for r in range(1, rounds + 1)
            for side, rate in (("fencekeeper", fk), ("baseline", base))]


def normal_ceiling(rounds=1):
    return [(c, r, b, rate) for c, (rate, b) in NORMAL_CEILING.items()
            for r in range(1, rounds + 1)]


def replace(rows, scen, c, rnd, side, rate):
    return [(s, cc, r, sd, rate if (s, cc, r, sd) == (scen, c, rnd, side) else x)
            for s, cc, r, sd, x in rows]


class Report:
    def __init__(self, rows, ceiling=(), idem=(), txn=(), create=(), mix=(), meta=()):
        d = tempfile.mkdtemp(prefix="fk-report-test-")
        try:
            write_results(d, rows, ceiling, idem, txn, create, mix, meta)
            p = subprocess.run([sys.executable, REPORT, d, "0"], capture_output=True,
                               text=True, timeout=120)
            if p.returncode != 0:
                raise AssertionError("report.py exited %d:\n%s%s" % (p.returncode, p.stdout, p.stderr))
            with open(os.path.join(d, "benchmarks.md")) as f:
                self.md = f.read()
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def section(self, title):
        m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(title), self.md, re.M | re.S)
        assert m, "no section %r in the report" % title
        return m.group(1)

    def verdicts(self):
        """target -> (measured, verdict) from the Targets table."""
        out = {}
        for line in self.section("Targets").splitlines():
            cells = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(cells) == 3 and cells[0] not in ("target", "---"):
                out[cells[0]] = (cells[1], cells[2])
        return out

    def throughput_row(self, scen, c):
        for line in self.section("Throughput: ratio to the baseline").splitlines():
            cells = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(cells) > 3 and cells[0] == scen and cells[2] == str(c):
                return cells
        raise AssertionError("no throughput row for %s at %d clients" % (scen, c))

    def problems(self):
        return self.section("Problems seen during the run")


P128 = "P ratio at 128 clients ≥ 2.0"
P32 = "P ratio at 32 clients ≥ 2.0"


RELEASE = (("previous", "32d0e1a"), ("previous_release", "32d0e1a"))


def with_previous(rows, rel):
    """rows plus a "previous" side per fencekeeper row: its rate ÷ rel(scen, clients)."""
    return rows + [(s, c, r, "previous", rate / rel(s, c))
                   for s, c, r, side, rate in rows if side == "fencekeeper"]


class PreviousReleaseTest(unittest.TestCase):
    def test_previous_release_ratio_has_a_target_per_scenario_and_client_count(self):
        rows = with_previous(normal_rows(rounds=3), lambda s, c: 0.95 if (s, c) == ("P", 32) else 1.0)
        r = Report(rows, normal_ceiling(rounds=3),
                   meta=RELEASE + (("fsync", "3067.861 ops/s, 326 us/op"),))
        v = r.verdicts()
        self.assertEqual(v["P ÷ previous release 32d0e1a at 32 clients ≥ 0.97"][1], "**MISS**")
        self.assertTrue(v["P ÷ previous release 32d0e1a at 32 clients ≥ 0.97"][0].startswith("0.950"))
        for scen in "PFSH":
            for c in (8, 32, 128):
                if (scen, c) != ("P", 32):
                    self.assertEqual(v["%s ÷ previous release 32d0e1a at %d clients ≥ 0.97" % (scen, c)][1],
                                     "**PASS**", (scen, c))
        # The baseline targets stay, beside them.
        self.assertEqual(v[P128][1], "**PASS**")
        table = r.section("Throughput: ratio to the baseline")
        self.assertIn("### Against the previous release, 32d0e1a (bench.sh's `previous_release`", table)
        self.assertIn("| P | 32 | 18,451 writes/s | 19,422 writes/s | **0.950** |", table)
        # The disk's speed and pgbench's own rate, for reading the ratio to pgbench.
        run = r.section("This run")
        self.assertIn("fdatasync 3067.861 ops/s, 326 us/op", run)
        self.assertIn("a **fast** disk today", run)
        self.assertIn("pgbench's own rate 8,381 tps at 8 clients, 10,911 tps at 32 clients", run)

    def test_another_revision_is_compared_without_the_release_targets(self):
        rows = with_previous(normal_rows(), lambda s, c: 0.5)
        r = Report(rows, normal_ceiling(), meta=(("previous", "abc1234 (HEAD~1)"),
                                                 ("fsync", "400.0 ops/s, 2500 us/op")))
        v = r.verdicts()
        self.assertEqual([t for t in v if "previous release" in t], [])
        self.assertIn("### Against abc1234 (HEAD~1)", r.section("Throughput: ratio to the baseline"))
        self.assertIn("a **slow** disk today", r.section("This run"))


class VerdictTest(unittest.TestCase):
    def test_normal_run_keeps_its_verdicts(self):
        r = Report(normal_rows(), normal_ceiling())
        v = r.verdicts()
        self.assertEqual([t for t, (_, w) in v.items() if "INVALID" in w], [])
        self.assertNotIn("collapsed", r.section("Throughput: ratio to the baseline"))
        self.assertNotIn("collapsed", r.problems())
        self.assertEqual(v[P32][1], "**MISS**")
        self.assertTrue(v[P32][0].startswith("1.69"), v[P32])
        self.assertEqual(v[P128][1], "**PASS**")
        self.assertTrue(v[P128][0].startswith("3.09"), v[P128])
        self.assertEqual(v["F ratio at 32 clients ≥ 1.5"], ("1.29", "**MISS**"))
        self.assertEqual(v["S ratio at 128 clients ≥ 0.5"], ("0.51", "**PASS**"))
        self.assertEqual(v["H ratio at 32 clients ≥ 0.6"], ("0.67", "**PASS**"))

    def test_quick_run_with_pgbench_collapsed_at_128_is_invalid(self):
        # A --quick round seen in practice: pgbench ran at 59 transactions/s at 128 clients.
        rows = replace(normal_rows(scens="P"), "P", 128, 1, "baseline", 59)
        rows = replace(rows, "P", 128, 1, "fencekeeper", 15549)
        r = Report(rows, normal_ceiling())
        measured, verdict = r.verdicts()[P128]
        self.assertEqual(verdict, "**INVALID: baseline collapsed**")
        self.assertIn("pgbench ran at 59/s in round 1", measured)
        self.assertNotIn("263", r.section("Targets"))
        row = r.throughput_row("P", 128)
        self.assertEqual(row[6], "—")
        self.assertIn("INVALID", row[9])
        self.assertIn("P c=128 round 1: INVALID: baseline collapsed: pgbench ran at 59/s",
                      r.problems())
        # The other client counts are measured as before.
        self.assertEqual(r.verdicts()[P32][1], "**MISS**")

    def test_collapsed_round_is_left_out_of_the_median(self):
        rows = normal_rows(rounds=3, scens="P")
        rows = replace(rows, "P", 128, 2, "baseline", 59)
        rows = replace(rows, "P", 128, 3, "fencekeeper", 15000)  # ratio 1.57 in round 3
        r = Report(rows, normal_ceiling(rounds=3))
        measured, verdict = r.verdicts()[P128]
        # Rounds 1 and 3 only: median of 3.09 and 1.57 is 2.33 (with round 2 it was 3.09).
        self.assertTrue(measured.startswith("2.33 (1 of 3 rounds left out: baseline collapsed)"),
                        measured)
        self.assertEqual(verdict, "**PASS**")
        self.assertEqual(r.throughput_row("P", 128)[7], "1.57–3.09")
        self.assertIn("P c=128 round 2: INVALID", r.problems())

    def test_ceiling_floor_alone_catches_a_collapse(self):
        # One client count: nothing else to compare with but the batch ceiling of the
        # round (40,000 writes/s in batches of 64: 625 commits/s over one connection).
        rows = [("P", 128, 1, "fencekeeper", 20000), ("P", 128, 1, "baseline", 300)]
        r = Report(rows, [(128, 1, 64, 40000)])
        measured, verdict = r.verdicts()[P128]
        self.assertEqual(verdict, "**INVALID: baseline collapsed**")
        self.assertIn("under half the 625 commits/s of the batch statement alone", measured)
        rows = [("P", 128, 1, "fencekeeper", 20000), ("P", 128, 1, "baseline", 5000)]
        self.assertEqual(Report(rows, [(128, 1, 64, 40000)]).verdicts()[P128],
                         ("4.00 (batch statement alone: 8.00)", "**PASS**"))

    def test_a_larger_client_count_scaled_down_catches_a_collapse(self):
        # F at 32 at 100/s: under a tenth of its 7,431/s at 8 clients (its 4,543/s at 128,
        # scaled to 32 clients, implies less: 1,136/s).
        rows = replace(normal_rows(scens="F"), "F", 32, 1, "baseline", 100)
        r = Report(rows)
        measured, verdict = r.verdicts()["F ratio at 32 clients ≥ 1.5"]
        self.assertEqual(verdict, "**INVALID: baseline collapsed**")
        self.assertIn("its median at 8 clients was 7,431/s", measured)
        # 8 clients, below both others: 11,443/s at 32 scaled to 8 is 2,861/s.
        rows = replace(normal_rows(scens="F"), "F", 8, 1, "baseline", 200)
        row = Report(rows).throughput_row("F", 8)
        self.assertEqual(row[9], "baseline collapsed")

    def test_a_baseline_at_zero_is_invalid_not_dropped(self):
        rows = [("S", 32, 1, "fencekeeper", 90000), ("S", 32, 1, "baseline", 0)]
        measured, verdict = Report(rows).verdicts()["S ratio at 32 clients ≥ 0.5"]
        self.assertEqual(verdict, "**INVALID: baseline collapsed**")
        self.assertIn("no requests completed", measured)

    def test_idempotency_rows_and_their_verdicts(self):
        # Three rounds; P at 32: keyed ÷ plain 0.90, 0.80, 0.88 (median 0.88, PASS), replays
        # ÷ keyed 2.0 in each round; F at 32: keyed ÷ plain 0.5 (MISS), replays slower (MISS).
        idem = []
        for rnd, (plain, keyed) in enumerate(((10000, 9000), (10000, 8000), (10000, 8800)), 1):
            idem += [("P", 32, rnd, "plain", plain), ("P", 32, rnd, "keyed", keyed),
                     ("P", 32, rnd, "replay", 2 * keyed)]
            idem += [("F", 32, rnd, "plain", 8000), ("F", 32, rnd, "keyed", 4000),
                     ("F", 32, rnd, "replay", 3000)]
            idem += [("P", 8, rnd, "plain", 5000), ("P", 8, rnd, "keyed", 4000),
                     ("P", 8, rnd, "replay", 9000)]
        r = Report(normal_rows(scens="H"), idem=idem)
        v = r.verdicts()
        self.assertEqual(v["I P: writes with a key ÷ without at 32 clients ≥ 0.85"], ("0.88", "**PASS**"))
        self.assertEqual(v["I P: replays ÷ writes with a key at 32 clients > 1"], ("2.00", "**PASS**"))
        self.assertEqual(v["I F: writes with a key ÷ without at 32 clients ≥ 0.85"], ("0.50", "**MISS**"))
        self.assertEqual(v["I F: replays ÷ writes with a key at 32 clients > 1"], ("0.75", "**MISS**"))
        self.assertFalse([t for t in v if t.startswith("I ") and "at 8 clients" in t])
        rows = [line for line in r.section("Idempotency-Key: writes with a key, and replays").splitlines()
                if line.startswith("| P | PUT → Postgres | 32 |")]
        self.assertEqual(len(rows), 1)
        cells = [x.strip() for x in rows[0].strip().strip("|").split("|")]
        self.assertEqual(cells[3:7], ["10,000 writes/s", "8,800 writes/s", "**0.88**", "0.80–0.90"])
        self.assertEqual(cells[9:12], ["17,600 replays/s", "**2.00**", "2.00–2.00"])
        # Without idem.tsv there is no such section.
        self.assertNotIn("Idempotency-Key: writes", Report(normal_rows(scens="H")).md)

    def test_transaction_rows_and_their_verdicts(self):
        # P at 1 client: 500 PUTs/s, transactions 250, 200, 150/s → latency ratios 2, 2.5,
        # 3.33 (median 2.5, PASS); F at 1 client: 1000 PUTs/s vs 200 transactions/s → 5
        # (MISS); at 8 clients a row but no verdict.
        txn = []
        for rnd, tx in enumerate((250, 200, 150), 1):
            txn += [("P", 1, rnd, "put", 500), ("P", 1, rnd, "txn", tx),
                    ("F", 1, rnd, "put", 1000), ("F", 1, rnd, "txn", 200),
                    ("P", 8, rnd, "put", 3000), ("P", 8, rnd, "txn", 1000)]
        r = Report(normal_rows(scens="H"), txn=txn)
        v = r.verdicts()
        self.assertEqual(v["T P: a 10-op transaction's latency ÷ a PUT's at 1 client ≤ 3"], ("2.50", "**PASS**"))
        self.assertEqual(v["T F: a 10-op transaction's latency ÷ a PUT's at 1 client ≤ 3"], ("5.00", "**MISS**"))
        self.assertFalse([t for t in v if t.startswith("T ") and "at 8 clients" in t])
        rows = [line for line in r.section("Transactions").splitlines() if line.startswith("| T | P | 1 |")]
        self.assertEqual(len(rows), 1)
        cells = [x.strip() for x in rows[0].strip().strip("|").split("|")]
        self.assertEqual(cells[3:8], ["500", "200", "2.00 ms / 5.00 ms", "**2.50**", "2.00–3.33"])
        self.assertEqual(cells[10:13], ["—", "—", "2,000"])
        self.assertNotIn("## Transactions", Report(normal_rows(scens="H")).md)

    def test_transaction_floor_from_the_new_file_probe(self):
        # F at 1 client: 1000 PUTs/s (1 ms) and 200 transactions/s (ratio 5, MISS); a new
        # file cost 100, 300, 500 µs → floors 1 + 9 × 0.1, 0.3, 0.5 ms ÷ 1 ms = 1.9, 3.7,
        # 5.5: median 3.7, shown beside the MISS. F-tmpfs: 2000 vs 1000/s (2.0), 20 µs per file
        # (floor 1.36), and no verdict of its own.
        txn, create = [], []
        for rnd, us in enumerate((100, 300, 500), 1):
            txn += [("F", 1, rnd, "put", 1000), ("F", 1, rnd, "txn", 200),
                    ("F-tmpfs", 1, rnd, "put", 2000), ("F-tmpfs", 1, rnd, "txn", 1000)]
            create += [("F", rnd, us), ("F-tmpfs", rnd, 20)]
        r = Report(normal_rows(scens="H"), txn=txn, create=create)
        v = r.verdicts()
        self.assertEqual(v["T F: a 10-op transaction's latency ÷ a PUT's at 1 client ≤ 3"], ("5.00", "**MISS**"))
        self.assertFalse([t for t in v if t.startswith("T F-tmpfs")])
        sec = r.section("Transactions").splitlines()
        f_row = [x.strip() for x in next(l for l in sec if l.startswith("| T | F | 1 |")).strip().strip("|").split("|")]
        self.assertEqual(f_row[6], "**5.00**")
        self.assertEqual(f_row[9], "**MISS**")  # the probe explains; it excuses nothing
        self.assertEqual(f_row[10:12], ["3.70", "300"])
        m_row = [x.strip() for x in next(l for l in sec if l.startswith("| T | F-tmpfs | 1 |")).strip().strip("|").split("|")]
        self.assertEqual(m_row[6], "**2.00**")
        self.assertEqual(m_row[8:12], ["—", "", "1.36", "20"])
        # The rows come in the order P, F, F-tmpfs.
        self.assertLess(sec.index(next(l for l in sec if l.startswith("| T | F | 1 |"))),
                        sec.index(next(l for l in sec if l.startswith("| T | F-tmpfs | 1 |"))))

    def test_transactions_beside_group_commit(self):
        # puts alone: 1000 batches, 800 fsyncs (0.8 per batch). mix: 900 batches and 500
        # transactions with 970, 1220, 720 fsyncs → beyond 900 × 0.8 = 720: 250, 500, 0
        # → 0.5, 1.0, 0.0 per transaction (median 0.50).
        txn = [("P", 1, 1, "put", 500), ("P", 1, 1, "txn", 250)]
        mix = []
        for rnd, wal in enumerate((970, 1220, 720), 1):
            mix += [(rnd, "puts", 1000, 0, 800), (rnd, "mix", 900, 500, wal)]
        r = Report(normal_rows(scens="H"), txn=txn, mix=mix)
        sec = r.section("Transactions")
        self.assertIn("Median: **0.50**", sec)
        v = r.verdicts()
        self.assertEqual(v["T P: transactions share group commit with single writes (WAL fsyncs per "
                           "transaction beyond the batches' ≤ 0.5)"], ("0.50", "**PASS**"))
        rows = [[x.strip() for x in l.strip().strip("|").split("|")]
                for l in sec.splitlines() if re.match(r"^\| [0-9]+ \| (puts|mix) \|", l)]
        self.assertEqual(len(rows), 6)
        self.assertEqual(rows[0][1:], ["puts", "5,000", "—", "1,000", "0", "800", "1.25", "—", "—"])
        self.assertEqual(rows[1][1:], ["mix", "5,000", "50", "900", "500", "970", "1.44", "0.50", "—"])
        self.assertEqual(rows[3][8], "1.00")
        self.assertEqual(rows[5][8], "0.00")
        # Each transaction with a fsync of its own: 900 × 0.8 + 500 = 1220 in every round.
        mix = [m for rnd in (1, 2) for m in ((rnd, "puts", 1000, 0, 800), (rnd, "mix", 900, 500, 1220))]
        v = Report(normal_rows(scens="H"), txn=txn, mix=mix).verdicts()
        self.assertEqual(v["T P: transactions share group commit with single writes (WAL fsyncs per "
                           "transaction beyond the batches' ≤ 0.5)"], ("1.00", "**MISS**"))
        # The direct count from xmin ("SHARED TOTAL"): 400, 450, 100 of 500 → median 80%.
        mix = []
        for rnd, shared in enumerate(("400 500", "450 500", "100 500"), 1):
            mix += [(rnd, "puts", 1000, 0, 800, ""), (rnd, "mix", 900, 500, 800, shared)]
        sec = Report(normal_rows(scens="H"), txn=txn, mix=mix).section("Transactions")
        self.assertIn("Median: **80%** of the transactions", sec)
        rows = [[x.strip() for x in l.strip().strip("|").split("|")]
                for l in sec.splitlines() if re.match(r"^\| [0-9]+ \| (puts|mix) \|", l)]
        self.assertEqual([r[9] for r in rows], ["—", "400 of 500 (80%)", "—", "450 of 500 (90%)",
                                                "—", "100 of 500 (20%)"])

    def test_tls_rows_and_their_verdicts(self):
        # Scenario L (bench.sh --only L): rows H-TLS and S-TLS, target ≥ 0.5 at every client
        # count (issue 35: "as for plaintext"). H-TLS at 8: 0.60 (PASS); at 32: per-round
        # 0.45, 0.55, 0.48 → median 0.48 (MISS); at 128: exactly 0.50 (PASS). S-TLS at 8
        # and 32: 0.70; at 128: 0.40 (MISS).
        rates = {("H-TLS", 8): [(30000, 50000)] * 3,
                 ("H-TLS", 32): [(27000, 60000), (33000, 60000), (28800, 60000)],
                 ("H-TLS", 128): [(35000, 70000)] * 3,
                 ("S-TLS", 8): [(28000, 40000)] * 3,
                 ("S-TLS", 32): [(35000, 50000)] * 3,
                 ("S-TLS", 128): [(20000, 50000)] * 3}
        rows = [(s, c, rnd, side, rate)
                for (s, c), per in rates.items() for rnd, pair in enumerate(per, 1)
                for side, rate in zip(("fencekeeper", "baseline"), pair)]
        r = Report(normal_rows(scens="HS") + rows)
        v = r.verdicts()
        self.assertEqual(v["H-TLS ratio at 8 clients ≥ 0.5"], ("0.60", "**PASS**"))
        self.assertEqual(v["H-TLS ratio at 32 clients ≥ 0.5"], ("0.48", "**MISS**"))
        self.assertEqual(v["H-TLS ratio at 128 clients ≥ 0.5"], ("0.50", "**PASS**"))
        self.assertEqual(v["S-TLS ratio at 32 clients ≥ 0.5"], ("0.70", "**PASS**"))
        self.assertEqual(v["S-TLS ratio at 128 clients ≥ 0.5"], ("0.40", "**MISS**"))
        # The plaintext rows keep their own targets beside them.
        self.assertEqual(v["H ratio at 32 clients ≥ 0.6"], ("0.67", "**PASS**"))
        row = r.throughput_row("H-TLS", 32)
        self.assertEqual(row[1], "GET /healthz over TLS")
        self.assertEqual(row[3:10], ["28,800 req/s", "nginx `return 204`, TLS", "60,000/s",
                                     "**0.48**", "0.45–0.55", "≥ 0.5", "**MISS**"])
        self.assertEqual(r.throughput_row("S-TLS", 128)[1],
                         "stale PUT → 409 over TLS (Postgres store)")
        # The TLS rows come after the plaintext ones, and are explained.
        sec = r.section("Throughput: ratio to the baseline")
        self.assertLess(sec.index("| H | GET /healthz | 128 |"), sec.index("| H-TLS |"))
        self.assertIn("H-TLS and S-TLS (scenario L)", sec)
        self.assertNotIn("H-TLS and S-TLS (scenario L)", Report(normal_rows(scens="HS")).md)
        # A TLS baseline that completed nothing gives no ratio, as for the others.
        v = Report(normal_rows(scens="HS") + replace(rows, "S-TLS", 128, 1, "baseline", 0)).verdicts()
        self.assertEqual(v["S-TLS ratio at 128 clients ≥ 0.5"],
                         ("0.40 (1 of 3 rounds left out: baseline collapsed)", "**MISS**"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
