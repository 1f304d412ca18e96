"""A Postgres primary and a streaming standby on loopback, for the HA tests
(test_postgres_ha.py, docs/postgres.md "High availability"). Python 3 stdlib only.

  pair = HaPair(sync=True)      # or sync=False: asynchronous replication
  pair.url                      # postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/
                                #   fencekeeper_test?target_session_attrs=read-write
  pair.failover()               # kill -9 the primary, promote the standby (and clear its
                                # synchronous_standby_names, as an orchestrator does)
  pair.rebuild()                # the old primary comes back as the new standby
  pair.remove()

Each server keeps its port for the whole run; the roles swap at every failover. Both
run as the postgres user when the test runs as root (Postgres refuses root), in a temp
dir, with fsync off and 1 MB WAL segments (pg_rewind and pg_basebackup copy less) (nothing here survives a machine crash, only server crashes, which
the page cache survives). The standby is made with `pg_basebackup -R` and streams from the
primary under its own application_name. Synchronous mode: the primary's
synchronous_standby_names names that application_name and synchronous_commit = on, so
a commit is acknowledged once the standby has it on disk. Asynchronous mode: the
replication connection goes through a delay_proxy.DelayProxy, whose cut() makes the
standby miss what the primary acknowledges from then on: a real loss window.
"""

import atexit
import os
import shutil
import subprocess
import tempfile
import time

import delay_proxy
import fk

DB = "fencekeeper_test"
_template_dir = None


class Node:
    def __init__(self, name, root):
        self.name = name               # also its application_name as a standby
        self.port = fk.free_port()
        self.data = os.path.join(root, name)
        self.log = os.path.join(root, name + ".log")

    def url(self, db=DB):
        return "postgresql://postgres@127.0.0.1:%d/%s" % (self.port, db)


class HaPair:
    def __init__(self, sync=True):
        self.sync = sync
        self.initdb = fk.pg_tool("initdb")
        self.pg_ctl = fk.pg_tool("pg_ctl")
        self.basebackup = fk.pg_tool("pg_basebackup")
        self.rewind = fk.pg_tool("pg_rewind")
        self.psql_exe = fk.require_tool("psql")
        self.dir = tempfile.mkdtemp(prefix="fk-pgha-")
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        self.primary = Node("node_a", self.dir)
        self.standby = Node("node_b", self.dir)
        self.nodes = (self.primary, self.standby)
        self.relay = None              # async: the replication connection's proxy
        self.failovers = 0
        self.rewinds = 0               # rebuilds done by pg_rewind (the others: pg_basebackup)
        self.rewind_failures = []      # what pg_rewind and the server said when it did not do
        self._run(["cp", "-a", self._template(), self.primary.data])
        with open(os.path.join(self.primary.data, "postgresql.conf"), "a") as f:
            f.write("\n# pg_ha.py\n"
                    "listen_addresses = '127.0.0.1'\n"
                    "unix_socket_directories = '%s'\n"
                    "max_connections = 100\n"
                    "wal_level = replica\n"
                    "max_wal_senders = 10\n"
                    "wal_keep_size = '64MB'\n"
                    "min_wal_size = '4MB'\n"
                    "max_wal_size = '64MB'\n"
                    "hot_standby = on\n"
                    "wal_log_hints = on\n"
                    "fsync = off\n"
                    "synchronous_commit = on\n"
                    "wal_receiver_status_interval = '1s'\n"
                    "shared_buffers = '32MB'\n" % self.dir)
        self._start(self.primary)
        self.psql(self.primary, "CREATE DATABASE %s" % DB, db="postgres")
        self.rebuild()

    # --- plumbing ----------------------------------------------------------------
    def _template(self):
        """A fresh initdb, made once per process and copied for every pair (initdb takes
        seconds on a busy machine, a copy a fraction of one)."""
        global _template_dir
        if _template_dir is None:
            d = tempfile.mkdtemp(prefix="fk-pgha-template-")
            if self.as_postgres:
                shutil.chown(d, "postgres")
            self._run([self.initdb, "-D", os.path.join(d, "data"), "-A", "trust", "-U", "postgres",
                       "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--wal-segsize=1"])
            atexit.register(shutil.rmtree, d, True)
            _template_dir = d
        return os.path.join(_template_dir, "data")

    def _run(self, cmd, check=True, timeout=120):
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
        return r

    def _start(self, node):
        self._run([self.pg_ctl, "-D", node.data, "-w", "-t", "60", "-l", node.log,
                   "-o", "-p %d" % node.port, "start"])

    def psql(self, node, sql, db=DB, timeout=30):
        """Runs `sql` on `node` (unaligned, tuples only); the output's lines."""
        r = subprocess.run([self.psql_exe, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                            "-d", node.url(db), "-c", sql],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("psql on %s: %s" % (node.name, r.stderr.strip()))
        return [line for line in r.stdout.splitlines() if line]

    @property
    def url(self):
        """fencekeeper's store URL: both servers, libpq picks the one that takes writes."""
        return ("postgresql://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?target_session_attrs=read-write"
                % (self.nodes[0].port, self.nodes[1].port, DB))

    def _set_sync_names(self, node, names):
        self.psql(node, "ALTER SYSTEM SET synchronous_standby_names = '%s'" % names)
        self.psql(node, "SELECT pg_reload_conf()")

    # --- the standby ---------------------------------------------------------------
    def rebuild(self):
        """(Re)makes self.standby from the primary, starts it, and waits until it streams
        (and, in synchronous mode, is the synchronous standby and has everything the
        primary had committed when it started waiting). The old primary after a failover
        is rewound (pg_rewind, which first finishes its crash recovery, then copies what
        differs from the new primary's timeline), as an operator would; the first
        standby, or one pg_rewind did not repair (it does not stream within 15 s), is a
        fresh pg_basebackup -R."""
        sb, pr = self.standby, self.primary
        if self.relay is not None:
            self.relay.stop()
            self.relay = None
        port = pr.port
        if not self.sync:
            self.relay = delay_proxy.DelayProxy("127.0.0.1", pr.port, 0.0).start()
            port = self.relay.port
        if os.path.exists(os.path.join(sb.data, "PG_VERSION")):
            # A just-promoted server's control file names its new timeline only after a
            # checkpoint; before it pg_rewind sees one timeline and rewinds nothing.
            self.psql(pr, "CHECKPOINT")
            r = self._run([self.rewind, "-D", sb.data, "-R", "--no-sync",
                           "--source-server=host=127.0.0.1 port=%d user=postgres dbname=postgres" % pr.port],
                          check=False)
            if r.returncode == 0 and self._start_standby(port, wait=15.0, check=False):
                self.rewinds += 1
                return
            self.rewind_failures.append((r.stdout + r.stderr)[-1500:] + self.log_tail(sb, 1500))
            self._run([self.pg_ctl, "-D", sb.data, "-m", "immediate", "-w", "stop"], check=False)
        shutil.rmtree(sb.data, ignore_errors=True)
        self._run([self.basebackup, "-h", "127.0.0.1", "-p", str(pr.port), "-U", "postgres",
                   "-D", sb.data, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync",
                   "-d", "application_name=%s" % sb.name])
        self._start_standby(port)

    def _start_standby(self, port, wait=60.0, check=True):
        sb, pr = self.standby, self.primary
        with open(os.path.join(sb.data, "postgresql.auto.conf"), "a") as f:
            # What -R wrote, with the relay's port in asynchronous mode (a later line wins).
            f.write("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=%s'\n"
                    % (port, sb.name))
        self._start(sb)
        if self.sync:
            self._set_sync_names(pr, '"%s"' % sb.name)
        return self.wait_streaming(wait, check)

    def wait_streaming(self, timeout=60.0, check=True):
        target = self.psql(self.primary, "SELECT pg_current_wal_lsn()")[0]
        want_sync = "sync" if self.sync else "async"
        deadline = time.monotonic() + timeout
        while True:
            rows = self.psql(self.primary,
                             "SELECT state, sync_state, flush_lsn >= '%s'::pg_lsn FROM pg_stat_replication "
                             "WHERE application_name = '%s'" % (target, self.standby.name))
            if rows and rows[0] == "streaming|%s|t" % want_sync:
                return True
            if time.monotonic() > deadline:
                if not check:
                    return False
                raise fk.CheckFailed("standby %s not streaming (%s) within %.0fs; log:\n%s"
                                     % (self.standby.name, rows, timeout, self.log_tail(self.standby)))
            time.sleep(0.05)

    def log_tail(self, node, n=3000):
        try:
            with open(node.log) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    # --- failover ------------------------------------------------------------------
    def cut_replication(self):
        """Asynchronous mode: from now on the standby receives nothing more."""
        fk.check(self.relay is not None, "cut_replication needs asynchronous mode")
        self.relay.cut()

    def failover(self):
        """The primary crashes (pg_ctl stop -m immediate); the standby is promoted and,
        as an orchestrator does, its synchronous_standby_names is cleared (it would wait
        for a standby it no longer has). Returns the monotonic time the promotion ended
        (the new primary takes writes). The old primary stays down: rebuild() next."""
        old, new = self.primary, self.standby
        self._run([self.pg_ctl, "-D", old.data, "-m", "immediate", "-w", "stop"])
        self._run([self.pg_ctl, "-D", new.data, "-w", "-t", "60", "promote"])
        promoted = time.monotonic()
        self._set_sync_names(new, "")
        self.primary, self.standby = new, old
        self.failovers += 1
        return promoted

    def remove(self):
        if self.relay is not None:
            self.relay.stop()
        for n in self.nodes:
            if os.path.exists(os.path.join(n.data, "postmaster.pid")):
                self._run([self.pg_ctl, "-D", n.data, "-m", "immediate", "-w", "stop"], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
