"""Shared harness for fencekeeper's integration tests (Python 3 stdlib only).

What is here:
  - Proxy: start/stop a real `fencekeeper` process on 127.0.0.1:0, read the bound
    address from stdout, capture stderr to a file for log assertions, signal helpers.
  - RawConn: an HTTP/1.1 client over a raw socket (keep-alive, pipelining, arbitrary
    bytes for framing/smuggling tests). Client: the same over http.client.
  - Store parametrization: stores() yields the file store (a fresh temp dir) always
    and Postgres (a fresh schema) when FK_TEST_PG_URL is set.
  - Service discovery: service(), require_service(), require_tool(); each missing
    thing goes through missing(): a skip, or a failure under FK_REQUIRE_SERVICES=1.
  - A tiny runner: main(globals()) runs every `test_*` function (per store when it
    takes a `store` argument), prints "N passed, N failed", exits 1 on failure.
  - History: an operation-history recorder and checker for zombie/robustness tests.
  - Every response Client and RawConn read is checked against docs/openapi.yaml
    (openapi_validate.py); a test with an answer the spec does not document fails.

Environment:
  FENCEKEEPER_BIN         the binary (default: <repo>/build/fencekeeper); a relative path
                          is taken from the directory the test was started in
  FK_TEST_PG_URL          libpq URI of a Postgres the tests may create schemas in
  FK_TEST_REDIS_PORT      port of a Redis on 127.0.0.1
  FK_TEST_ETCD_ENDPOINTS  etcd client URL(s), comma separated
  FK_TEST_PG_BIN          the directory of initdb/pg_ctl for tests that run their own
                          cluster (default: the newest /usr/lib/postgresql/*/bin, else PATH)
  FK_REQUIRE_SERVICES=1   a missing service, tool or binary fails instead of skipping
                          (scripts/test.sh sets it)
  FK_KEEP_TMP=1           keep temp dirs (stores, logs) for debugging
  FK_TEST_FILTER          only run tests whose name contains this (also argv[1])
"""

import base64
import contextlib
import glob
import http.client
import inspect
import json
import os
import random
import re
import select
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

SKIP_EXIT = 77


# ---------------------------------------------------------------------------
# Errors and skipping
# ---------------------------------------------------------------------------

class Skip(Exception):
    """Raised by a test that does not apply where it runs (e.g. RSS bounds under ASan).
    Something missing from the environment goes through missing() instead."""


class CheckFailed(AssertionError):
    pass


def fail(msg):
    raise CheckFailed(msg)


def check(cond, msg="check failed"):
    if not cond:
        raise CheckFailed(msg)


def eq(actual, expected, what=""):
    if actual != expected:
        raise CheckFailed("%s: expected %r, got %r" % (what or "value", expected, actual))


def binary():
    """FENCEKEEPER_BIN as an absolute path: the proxies run in temp directories, and a
    path relative to where the test was started (build/fencekeeper) would not resolve
    there."""
    b = os.environ.get("FENCEKEEPER_BIN") or os.path.join(REPO, "build", "fencekeeper")
    return os.path.abspath(b)


# Scripts the tests start (demo.sh, zombie-check.sh, the recipes) may run elsewhere too.
if os.environ.get("FENCEKEEPER_BIN"):
    os.environ["FENCEKEEPER_BIN"] = binary()


def require_binary():
    b = binary()
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        missing("fencekeeper binary not found: %s" % b)
    return b


# ---------------------------------------------------------------------------
# Services
# ---------------------------------------------------------------------------

_SERVICE_ENV = {
    "postgres": "FK_TEST_PG_URL",
    "redis": "FK_TEST_REDIS_PORT",
    "etcd": "FK_TEST_ETCD_ENDPOINTS",
}


def services_required():
    return os.environ.get("FK_REQUIRE_SERVICES") == "1"


# The label of the test main() is running, None outside one (module level).
_current_test = None


def under_asan(pid):
    """Whether process `pid` runs under AddressSanitizer: GCC links it as libasan.so, clang
    statically, and both map its high shadow memory up to 0x10007fff8000 (x86_64). RSS then
    measures the sanitizer's quarantine and shadow, not fencekeeper."""
    with open("/proc/%d/maps" % pid) as f:
        maps = f.read()
    return "libasan" in maps or re.search(r"-10007fff8000 ", maps) is not None


def missing(what):
    """Gives up for lack of `what` (a service, tool or binary a test needs). Under
    FK_REQUIRE_SERVICES=1 (scripts/test.sh, which provides everything) that is a failure:
    a test that did not run checked nothing, and its file's other tests must not make
    it pass. Otherwise a skip. Inside a test it raises (CheckFailed or Skip); outside
    one (at module level, before the runner) it ends the whole file with exit 1 or 77."""
    required = services_required()
    if required:
        what = "%s (FK_REQUIRE_SERVICES=1: missing means failed)" % what
    if _current_test is None:
        print("%s: %s" % ("FAIL" if required else "SKIP", what), flush=True)
        sys.exit(1 if required else SKIP_EXIT)
    if required:
        raise CheckFailed(what)
    raise Skip(what)


def service(name):
    """The service's env value (URL, port or endpoints), or None."""
    var = _SERVICE_ENV.get(name, name)
    v = os.environ.get(var, "").strip()
    return v or None


def require_service(name):
    """Returns the service's value, or calls missing() when it is not provided."""
    v = service(name)
    if v is None:
        missing("service %s not provided (%s unset)" % (name, _SERVICE_ENV.get(name, name)))
    return v


def pg_tool(name):
    """The path of Postgres server program `name` (initdb, pg_ctl, ...), or missing()."""
    d = os.environ.get("FK_TEST_PG_BIN", "").strip()
    if not d:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/" + name),
                       key=lambda f: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", f)])
        return require_tool(name, found[-1] if found else None)
    path = os.path.join(d, name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        missing("%s is not in FK_TEST_PG_BIN=%s" % (name, d))
    return path


def require_tool(name, path=None):
    """Returns the path of executable `name` (`path` if given, else the one on PATH), or
    calls missing() when there is none."""
    exe = path or shutil.which(name)
    if not exe or not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        missing("%s is not installed" % name)
    return exe


def redis_port():
    v = service("redis")
    return int(v) if v else None


def etcd_endpoints():
    v = service("etcd")
    return v.split(",") if v else None


# ---------------------------------------------------------------------------
# Temp dirs
# ---------------------------------------------------------------------------

_tmp_root = None
_cleanup = []


def tmpdir(prefix="fk"):
    global _tmp_root
    if _tmp_root is None:
        _tmp_root = tempfile.mkdtemp(prefix="fk-it-")
    return tempfile.mkdtemp(prefix=prefix + "-", dir=_tmp_root)


def _remove_tmp():
    if _tmp_root and os.environ.get("FK_KEEP_TMP") != "1":
        shutil.rmtree(_tmp_root, ignore_errors=True)
    elif _tmp_root:
        print("kept temp dir %s" % _tmp_root)


def rand_name(n=10, alphabet=string.ascii_lowercase + string.digits):
    return "".join(random.choice(alphabet) for _ in range(n))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# Stores
# ---------------------------------------------------------------------------

def deep_merge(a, b):
    """Returns a new dict: b merged into a (nested dicts merged, other values replaced)."""
    out = dict(a or {})
    for k, v in (b or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


class Store:
    """A store a test runs against. `url` goes to --store; `config` is merged into the
    proxy's config file (Postgres: the per-run schema)."""

    def __init__(self, kind, url, config=None, root=None, schema=None):
        self.kind = kind
        self.url = url
        self.config = config or {}
        self.root = root          # file store directory
        self.schema = schema      # postgres schema

    @property
    def name(self):
        return self.kind

    def __repr__(self):
        return "Store(%s, %s)" % (self.kind, self.url if self.kind == "file" else self.schema)

    def proxy(self, config=None, args=(), **kw):
        """A Proxy (not started) on this store."""
        return Proxy(self, config=config, args=args, **kw)

    def start(self, config=None, args=(), **kw):
        """A started Proxy on this store."""
        p = self.proxy(config=config, args=args, **kw)
        p.start()
        return p


_pg_schemas = []


def file_store():
    root = tmpdir("store")
    return Store("file", "file:" + root, root=root)


def pg_store(schema=None):
    url = service("postgres")
    if url is None:
        return None
    schema = schema or ("t_" + rand_name(12))
    _pg_schemas.append(schema)
    return Store("postgres", url, config={"postgres": {"schema": schema}}, schema=schema)


def stores():
    """The stores every contract test runs against: the file store (a fresh temp dir)
    always, and Postgres (a fresh schema) when FK_TEST_PG_URL is set. With
    FK_REQUIRE_SERVICES=1 a missing Postgres is an error."""
    out = [file_store()]
    pg = pg_store()
    if pg is not None:
        out.append(pg)
    elif services_required():
        raise RuntimeError("FK_REQUIRE_SERVICES=1 but FK_TEST_PG_URL is not set")
    return out


def store_kinds():
    """The kinds stores() would yield, without creating anything."""
    return ["file"] + (["postgres"] if service("postgres") else [])


def psql(sql, url=None, check_rc=True):
    """Runs SQL through the psql client; returns stdout."""
    url = url or require_service("postgres")
    exe = require_tool("psql")
    r = subprocess.run([exe, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                       capture_output=True, text=True, timeout=60)
    if check_rc and r.returncode != 0:
        raise RuntimeError("psql failed: %s" % r.stderr)
    return r.stdout


def _drop_pg_schemas():
    url = service("postgres")
    exe = shutil.which("psql")
    if not url or not exe or not _pg_schemas or os.environ.get("FK_KEEP_TMP") == "1":
        return
    sql = "".join('DROP SCHEMA IF EXISTS "%s" CASCADE;' % s for s in _pg_schemas)
    try:
        subprocess.run([exe, "-X", "-q", "-d", url, "-c", sql], capture_output=True, timeout=30)
    except Exception:
        pass


# ---------------------------------------------------------------------------
# HTTP responses and clients
# ---------------------------------------------------------------------------

# Every answer read is checked against docs/openapi.yaml. A mismatch is recorded rather
# than raised where the answer is read (tests that tolerate errors, e.g. around a kill,
# would swallow the exception); main() fails the test that recorded one.
_spec = None
_spec_error = None
_spec_violations = []
_spec_lock = threading.Lock()


def _spec_violation(text):
    with _spec_lock:
        _spec_violations.append(text)


def check_against_spec(method, target, resp, head=False):
    """Records a violation when `resp` (the answer to `method target`; both None when the
    request is unknown) is not what docs/openapi.yaml documents."""
    global _spec, _spec_error
    if _spec is None and _spec_error is None:
        try:
            import openapi_validate
            _spec = openapi_validate.Spec()
        except Exception as e:   # python3-jsonschema or python3-yaml missing, or a bad spec
            _spec_error = "cannot check answers against docs/openapi.yaml: %r" % (e,)
            print(("FAIL: " if services_required() else "note: ") + _spec_error, flush=True)
    if _spec is None:
        if services_required():
            _spec_violation(_spec_error)
        return
    problem = _spec.check(method, target, resp.status, resp.header_list, resp.body, head)
    if problem:
        _spec_violation(problem)


def take_spec_violations():
    """The violations recorded since the last call (and forgets them)."""
    with _spec_lock:
        out = list(_spec_violations)
        del _spec_violations[:]
    return out


class Response:
    def __init__(self, status, reason, headers, body, version="HTTP/1.1"):
        self.status = status
        self.reason = reason
        self.header_list = headers            # [(name, value)] as received
        self.body = body                      # bytes
        self.version = version

    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.header_list:
            if k.lower() == name:
                return v
        return default

    def headers_named(self, name):
        name = name.lower()
        return [v for k, v in self.header_list if k.lower() == name]

    @property
    def headers(self):
        return {k.lower(): v for k, v in self.header_list}

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except Exception as e:
            raise CheckFailed("response body is not JSON (%s): %r" % (e, self.body[:300]))

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    @property
    def etag(self):
        return self.header("ETag")

    def __repr__(self):
        return "<Response %d %r>" % (self.status, self.body[:200])


class ConnectionClosed(Exception):
    pass


def build_request(method, path, headers=None, body=None, host="127.0.0.1"):
    """Raw HTTP/1.1 request bytes. headers: dict or list of (name, value); a header
    value None suppresses it. Content-Length is added for a body unless given."""
    if isinstance(body, str):
        body = body.encode()
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    names = {k.lower() for k, _ in items}
    if "host" not in names:
        items.insert(0, ("Host", host))
    if body is not None and "content-length" not in names and "transfer-encoding" not in names:
        items.append(("Content-Length", str(len(body))))
    out = ["%s %s HTTP/1.1\r\n" % (method, path)]
    for k, v in items:
        if v is None:
            continue
        out.append("%s: %s\r\n" % (k, v))
    out.append("\r\n")
    data = "".join(out).encode("latin-1")
    return data + (body or b"")


class RawConn:
    """HTTP/1.1 over a raw socket: keep-alive, pipelining (send several requests,
    then read the responses in order), arbitrary bytes."""

    def __init__(self, host, port, timeout=10.0):
        self.host, self.port = host, port
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.timeout = timeout
        self.methods = []   # methods of requests sent and not yet answered (HEAD has no body)
        self.sent = None    # the requests sent, for check_against_spec (made on first send)

    def close(self):
        with contextlib.suppress(Exception):
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def send_raw(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        if self.sent is None:
            import openapi_validate
            self.sent = openapi_validate.RequestStream()
        self.sent.feed(data)
        self.sock.sendall(data)

    def send(self, method, path, headers=None, body=None):
        self.methods.append(method)
        self.send_raw(build_request(method, path, headers, body, host="%s:%d" % (self.host, self.port)))

    def request(self, method, path, headers=None, body=None):
        self.send(method, path, headers, body)
        return self.read_response()

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out reading response")
        self.sock.settimeout(remaining)
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionClosed("connection closed by server")
        self.buf += chunk

    def _read_until(self, marker, deadline):
        while marker not in self.buf:
            self._fill(deadline)
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def _read_n(self, n, deadline):
        while len(self.buf) < n:
            self._fill(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, timeout=None, method=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        if method is None:
            method = self.methods.pop(0) if self.methods else "GET"
        head = self._read_until(b"\r\n\r\n", deadline)
        lines = head[:-4].decode("latin-1").split("\r\n")
        m = re.match(r"(HTTP/\d\.\d) (\d{3}) ?(.*)", lines[0])
        if not m:
            raise CheckFailed("bad status line %r" % lines[0])
        version, status, reason = m.group(1), int(m.group(2)), m.group(3)
        headers = []
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
        resp = Response(status, reason, headers, b"", version)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return self._checked(resp, method)
        te = (resp.header("Transfer-Encoding") or "").lower()
        cl = resp.header("Content-Length")
        if "chunked" in te:
            body = b""
            while True:
                size_line = self._read_until(b"\r\n", deadline)
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    self._read_until(b"\r\n", deadline)  # (no trailers expected)
                    break
                body += self._read_n(size, deadline)
                self._read_n(2, deadline)
            resp.body = body
        elif cl is not None:
            resp.body = self._read_n(int(cl), deadline)
        else:
            # Body until close.
            try:
                while True:
                    self._fill(deadline)
            except ConnectionClosed:
                pass
            resp.body, self.buf = self.buf, b""
        return self._checked(resp, method)

    def _checked(self, resp, method):
        if resp.status >= 200:   # a 100 Continue is followed by the request's answer
            sent_method, target = self.sent.next_request() if self.sent else (None, None)
            check_against_spec(sent_method, target, resp, head=method == "HEAD")
        return resp

    def read_responses(self, n, timeout=None):
        return [self.read_response(timeout) for _ in range(n)]

    def is_closed(self, timeout=2.0):
        """True when the server closed the connection (EOF or reset) within timeout;
        any unread bytes are discarded."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                self.sock.settimeout(remaining)
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
            self.buf += chunk


def quote_key(key):
    return urllib.parse.quote(key, safe="/")


class Client:
    """HTTP over http.client with keep-alive; reconnects after a closed connection.
    Not thread-safe: one Client per thread."""

    def __init__(self, host, port, timeout=30.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = None
        self.resent = None   # the latest resend: (repr of the first attempt's error, its seconds, fresh)

    def close(self):
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def request(self, method, path, body=None, headers=None):
        if isinstance(body, str):
            body = body.encode()
        hdrs = dict(headers or {})
        t0 = time.monotonic()
        for attempt in (0, 1):
            fresh = self.conn is None
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                r = self.conn.getresponse()
                data = r.read()
                resp = Response(r.status, r.reason, list(r.getheaders()), data)
                if r.will_close:
                    self.close()
                check_against_spec(method, path, resp, head=method == "HEAD")
                return resp
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.close()
                # Only a request that never reached the server is safe to resend
                # blindly; writes carry tokens and are idempotent per the contract.
                if attempt == 1:
                    raise
                self.resent = (repr(e), time.monotonic() - t0, fresh)
            except Exception:
                self.close()
                raise

    # --- API helpers (docs/api.md#routes) ----------------------------------
    def put(self, key, body=b"", token=None, lock=None, content_type=None, headers=None):
        h = {}
        if token is not None:
            h["Fencing-Token"] = str(token)
        if lock is not None:
            h["Fencing-Lock"] = lock
        if content_type is not None:
            h["Content-Type"] = content_type
        h.update(headers or {})
        return self.request("PUT", "/v1/resources/" + quote_key(key), body=body, headers=h)

    def get(self, key, headers=None):
        return self.request("GET", "/v1/resources/" + quote_key(key), headers=headers)

    def head(self, key, headers=None):
        return self.request("HEAD", "/v1/resources/" + quote_key(key), headers=headers)

    def delete(self, key, token=None, lock=None, headers=None):
        h = {}
        if token is not None:
            h["Fencing-Token"] = str(token)
        if lock is not None:
            h["Fencing-Lock"] = lock
        h.update(headers or {})
        return self.request("DELETE", "/v1/resources/" + quote_key(key), headers=h)

    def fence(self, lock):
        return self.request("GET", "/v1/fences/" + quote_key(lock))

    def put_fence(self, lock, token, headers=None):
        h = {"Fencing-Token": str(token)}
        h.update(headers or {})
        return self.request("PUT", "/v1/fences/" + quote_key(lock), headers=h)

    def list_fences(self, prefix=None, limit=None, after=None):
        q = {}
        if prefix is not None:
            q["prefix"] = prefix
        if limit is not None:
            q["limit"] = str(limit)
        if after is not None:
            q["after"] = after
        path = "/v1/fences" + ("?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote) if q else "")
        return self.request("GET", path)

    def operation(self, name, token, lock, params, headers=None):
        h = {"Fencing-Token": str(token), "Fencing-Lock": lock, "Content-Type": "application/json"}
        h.update(headers or {})
        return self.request("POST", "/v1/operations/" + quote_key(name),
                            body=json.dumps({"params": params}).encode(), headers=h)

    def transaction(self, ops, token=None, lock=None, headers=None):
        """POST /v1/transactions with {"ops": ops} (docs/api.md#post-v1transactions);
        token and lock go to the Fencing-Token / Fencing-Lock headers (the ops' defaults)."""
        h = {"Content-Type": "application/json"}
        if token is not None:
            h["Fencing-Token"] = str(token)
        if lock is not None:
            h["Fencing-Lock"] = lock
        h.update(headers or {})
        return self.request("POST", "/v1/transactions", body=json.dumps({"ops": ops}).encode(),
                            headers=h)

    def healthz(self):
        return self.request("GET", "/healthz")

    def readyz(self):
        return self.request("GET", "/readyz")

    def metrics(self):
        return self.request("GET", "/metrics")


# ---------------------------------------------------------------------------
# The fencekeeper process
# ---------------------------------------------------------------------------

_live_proxies = []


class StartFailed(Exception):
    def __init__(self, msg, returncode=None, stderr=""):
        super().__init__(msg)
        self.returncode = returncode
        self.stderr = stderr


class Proxy:
    """One fencekeeper process. Config: a dict written to a JSON file (merged with the
    store's config) and passed with --config; extra args appended. The listen address
    is always 127.0.0.1:0 unless `listen` is given. `on_listening(proxy)`, if given, runs
    on the stdout reader thread the moment `listening on` is read (host and port set),
    before start() returns: a test can fire requests at that instant. It must not block."""

    def __init__(self, store=None, config=None, args=(), listen="127.0.0.1:0",
                 log_level=None, env=None, start_timeout=20.0, use_config_file=True,
                 on_listening=None):
        self.store = store
        self.config = deep_merge(store.config if store else {}, config or {})
        self.args = list(args)
        self.listen = listen
        self.log_level = log_level
        self.env = env
        self.start_timeout = start_timeout
        self.use_config_file = use_config_file
        self.on_listening = on_listening
        self.dir = tmpdir("proxy")
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.stdout_lines = []
        self.proc = None
        self.host = None
        self.port = None
        self.returncode = None
        self._stdout_thread = None
        self._listening = threading.Event()
        self._stderr_file = None
        self._log_offset = 0

    # --- lifecycle ---------------------------------------------------------
    def command(self):
        cmd = [require_binary()]
        if self.listen is not None:
            cmd += ["--listen", self.listen]
        if self.store is not None:
            cmd += ["--store", self.store.url]
        if self.log_level:
            cmd += ["--log-level", self.log_level]
        if self.config and self.use_config_file:
            path = os.path.join(self.dir, "config.json")
            with open(path, "w") as f:
                json.dump(self.config, f, indent=2)
            cmd += ["--config", path]
        return cmd + self.args

    def _read_stdout(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stdout_lines.append(line)
            m = re.search(r"listening on (\S+):(\d+)\s*$", line)
            if m and not self._listening.is_set():
                self.host = m.group(1).strip("[]")
                self.port = int(m.group(2))
                if self.on_listening:
                    self.on_listening(self)
                self._listening.set()

    def start(self):
        cmd = self.command()
        env = dict(os.environ)
        env.update(self.env or {})
        self._stderr_file = open(self.stderr_path, "ab")
        # Restarts append to the same file; log_lines(this_run=True) reads from here on.
        self._log_offset = os.path.getsize(self.stderr_path)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr_file,
                                     stdin=subprocess.DEVNULL, env=env, cwd=self.dir)
        _live_proxies.append(self)
        self.returncode = None
        self._listening.clear()
        self._stdout_thread = threading.Thread(target=self._read_stdout, daemon=True)
        self._stdout_thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._listening.is_set():
            if self.proc.poll() is not None:
                self._stdout_thread.join(2)
                if self._listening.is_set():
                    break
                self.returncode = self.proc.returncode
                raise StartFailed("fencekeeper exited with %s before listening; stderr:\n%s"
                                  % (self.proc.returncode, self.stderr_text()[-3000:]),
                                  self.proc.returncode, self.stderr_text())
            if time.monotonic() > deadline:
                self.kill()
                raise StartFailed("fencekeeper did not print 'listening on' within %.0fs; stderr:\n%s"
                                  % (self.start_timeout, self.stderr_text()[-3000:]))
            self._listening.wait(0.05)
        return self

    def restart(self, wait_ready=True):
        """Starts the process again on the same store and config (new port)."""
        if self.alive():
            self.stop()
        self.start()
        if wait_ready:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=30.0):
        """Waits until /readyz answers 200."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                with self.client(timeout=5) as c:
                    last = c.readyz()
                    if last.status == 200:
                        return last
            except OSError as e:
                last = e
            time.sleep(0.1)
        raise CheckFailed("not ready within %.0fs: %r" % (timeout, last))

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.proc.pid, sig)

    def sigterm(self):
        self.signal(signal.SIGTERM)

    def sigstop(self):
        self.signal(signal.SIGSTOP)

    def sigcont(self):
        self.signal(signal.SIGCONT)

    def wait(self, timeout=30.0):
        """Waits for exit; returns the exit code (negative = killed by signal)."""
        if self.proc is None:
            return self.returncode
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise CheckFailed("fencekeeper (pid %d) did not exit within %.0fs" % (self.proc.pid, timeout))
        if self._stdout_thread:
            self._stdout_thread.join(2)
        return self.returncode

    def kill(self):
        """kill -9, then reap."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            return self.wait(10)
        return None

    def stop(self, timeout=20.0):
        """SIGTERM and wait; kill -9 if it does not exit in time. Returns the exit code."""
        if not self.alive():
            return self.wait(1) if self.proc else None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.wait(timeout)
        except CheckFailed:
            self.kill()
            raise

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *a):
        if self.alive():
            self.kill()

    # --- logs --------------------------------------------------------------
    def stderr_text(self, this_run=False):
        """Everything written to stderr (by every start of this Proxy, or this_run: by
        the latest start only)."""
        try:
            with open(self.stderr_path, "rb") as f:
                if this_run:
                    f.seek(self._log_offset)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_lines(self, this_run=False):
        """Every stderr line that parses as a JSON object (this_run: of the latest start)."""
        out = []
        for line in self.stderr_text(this_run).splitlines():
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    obj = json.loads(line)
                    if isinstance(obj, dict):
                        out.append(obj)
        return out

    def wait_log(self, pred, timeout=5.0, this_run=False):
        """Waits for a JSON log line satisfying pred (this_run: written since the latest
        start); returns it."""
        deadline = time.monotonic() + timeout
        while True:
            for obj in self.log_lines(this_run):
                if pred(obj):
                    return obj
            if time.monotonic() > deadline:
                raise CheckFailed("no matching log line within %.0fs; stderr:\n%s"
                                  % (timeout, self.stderr_text()[-3000:]))
            time.sleep(0.05)

    # --- clients -----------------------------------------------------------
    def client(self, timeout=30.0):
        return Client(self.host, self.port, timeout=timeout)

    def raw(self, timeout=10.0):
        return RawConn(self.host, self.port, timeout=timeout)

    def _one(self, name, *a, **kw):
        with self.client() as c:
            return getattr(c, name)(*a, **kw)

    def request(self, *a, **kw):
        return self._one("request", *a, **kw)

    def put(self, *a, **kw):
        return self._one("put", *a, **kw)

    def get(self, *a, **kw):
        return self._one("get", *a, **kw)

    def head(self, *a, **kw):
        return self._one("head", *a, **kw)

    def delete(self, *a, **kw):
        return self._one("delete", *a, **kw)

    def fence(self, *a, **kw):
        return self._one("fence", *a, **kw)

    def put_fence(self, *a, **kw):
        return self._one("put_fence", *a, **kw)

    def list_fences(self, *a, **kw):
        return self._one("list_fences", *a, **kw)

    def operation(self, *a, **kw):
        return self._one("operation", *a, **kw)

    def transaction(self, *a, **kw):
        return self._one("transaction", *a, **kw)


def status_kib(pid, field):
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM, ...)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise CheckFailed("no %s for pid %d" % (field, pid))


def run_binary(args, timeout=20.0, env=None, cwd=None):
    """Runs fencekeeper to completion (for exit-code tests). Returns (rc, stdout, stderr).
    A process still running at the timeout is killed and reported as rc None."""
    cmd = [require_binary()] + list(args)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, env=e, cwd=cwd or tmpdir("run"))
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def write_config(cfg):
    path = os.path.join(tmpdir("cfg"), "config.json")
    with open(path, "w") as f:
        if isinstance(cfg, str):
            f.write(cfg)
        else:
            json.dump(cfg, f)
    return path


def kill_all_proxies():
    while _live_proxies:
        p = _live_proxies.pop()
        with contextlib.suppress(Exception):
            p.kill()
        if p._stderr_file:
            with contextlib.suppress(Exception):
                p._stderr_file.close()


# ---------------------------------------------------------------------------
# Operation history (for zombie / robustness tests)
# ---------------------------------------------------------------------------

class Op:
    __slots__ = ("id", "process", "kind", "lock", "key", "token", "value", "invoke_t",
                 "complete_t", "result", "info")

    def __init__(self, id, process, kind, lock, key, token, value):
        self.id, self.process, self.kind = id, process, kind
        self.lock, self.key, self.token, self.value = lock, key, token, value
        self.invoke_t = time.monotonic()
        self.complete_t = None
        self.result = None      # "ok" | "fail" | "unknown"
        self.info = None

    def __repr__(self):
        return ("Op(#%d %s %s lock=%s key=%s token=%s value=%r -> %s %s)"
                % (self.id, self.process, self.kind, self.lock, self.key, self.token,
                   (self.value[:40] if isinstance(self.value, (bytes, str)) else self.value),
                   self.result, self.info))


class History:
    """Records operations: invoke(...) → op; then ok(op) / fail(op) / unknown(op).

    Kinds: "put" (value = the body, should be unique per op), "delete", "fence"
    (PUT /v1/fences). Results: ok = 2xx acknowledged; fail = definitely not applied
    (4xx such as 409/412/428, or 503 which the contract says wrote nothing);
    unknown = 504, timeouts, connection errors, killed proxy: may go either way.

    check(state) verifies, per lock and key:
      1. no op acknowledged with a token below a token already acknowledged for that
         lock (in real time: the higher ack completed before the lower op was invoked);
      2. every acknowledged write is present after recovery (the key's final value is
         the last acked write or a write that may follow it: same-or-higher token,
         not failed), and every fence is at least its highest acked token;
      3. no rejected (failed) write is present.
    """

    def __init__(self):
        self.ops = []
        self.lock = threading.Lock()

    def invoke(self, process, kind, lock, key=None, token=None, value=None):
        with self.lock:
            op = Op(len(self.ops), process, kind, lock, key, token, value)
            self.ops.append(op)
            return op

    def _complete(self, op, result, info):
        op.complete_t = time.monotonic()
        op.result = result
        op.info = info
        return op

    def ok(self, op, info=None):
        return self._complete(op, "ok", info)

    def fail(self, op, info=None):
        return self._complete(op, "fail", info)

    def unknown(self, op, info=None):
        return self._complete(op, "unknown", info)

    def record_response(self, op, resp_or_exc):
        """Classifies a Response (or exception) per the contract and completes op."""
        if isinstance(resp_or_exc, BaseException):
            return self.unknown(op, repr(resp_or_exc))
        r = resp_or_exc
        if 200 <= r.status < 300:
            return self.ok(op, r.status)
        if r.status == 504 or r.status >= 500 and r.status != 503:
            return self.unknown(op, r.status)
        return self.fail(op, "%d %s" % (r.status, r.body[:120]))

    def pending_to_unknown(self):
        for op in self.ops:
            if op.result is None:
                self.unknown(op, "never completed")

    def summary(self):
        c = {}
        for op in self.ops:
            c[op.result] = c.get(op.result, 0) + 1
        return c

    def check(self, keys_state, fences_state=None):
        """keys_state: {key: None (absent) | (value_bytes, token_int_or_None)}.
        fences_state: {lock: token_int or None}. Returns a list of violation strings
        (empty = fine); raises CheckFailed with them when `raise_on` is default."""
        self.pending_to_unknown()
        errors = []
        by_lock = {}
        for op in self.ops:
            by_lock.setdefault(op.lock, []).append(op)

        # 1. no ack below an already-acked token, per lock (real-time order).
        for lock, ops in by_lock.items():
            acked = sorted((o for o in ops if o.result == "ok" and o.token is not None),
                           key=lambda o: o.complete_t)
            best = None  # highest token acked so far (by completion time)
            # For each acked op B, any acked op A with A.complete_t < B.invoke_t must have
            # A.token <= B.token.
            by_invoke = sorted(acked, key=lambda o: o.invoke_t)
            i = 0
            for b in by_invoke:
                while i < len(acked) and acked[i].complete_t < b.invoke_t:
                    if best is None or acked[i].token > best.token:
                        best = acked[i]
                    i += 1
                if best is not None and b.token < best.token:
                    errors.append("lock %s: %r acknowledged after %r had already been acknowledged"
                                  % (lock, b, best))

        # 2 + 3: final state per key.
        by_key = {}
        for op in self.ops:
            if op.kind in ("put", "delete") and op.key is not None:
                by_key.setdefault(op.key, []).append(op)
        for key, ops in by_key.items():
            if key not in keys_state:
                continue
            final = keys_state[key]
            acked = [o for o in ops if o.result == "ok"]
            max_acked = max((o.token for o in acked), default=None)
            last_acked = max(acked, key=lambda o: o.complete_t) if acked else None
            if final is None:
                if last_acked is not None and last_acked.kind != "delete":
                    # Absent is fine only if a delete that may follow the acked put exists.
                    cands = [o for o in ops if o.kind == "delete" and o.result != "fail"
                             and o.token >= max_acked
                             and not (o.result == "ok" and o.complete_t < last_acked.invoke_t)]
                    if not cands:
                        errors.append("key %s: absent, but %r was acknowledged" % (key, last_acked))
                continue
            value, token = final
            writers = [o for o in ops if o.kind == "put" and o.value == value]
            if not writers:
                errors.append("key %s: final value %r was never written by any op" % (key, value[:60]))
                continue
            if all(o.result == "fail" for o in writers):
                errors.append("key %s: holds the value of a rejected write %r" % (key, writers[0]))
                continue
            w = [o for o in writers if o.result != "fail"][0]
            if token is not None and w.token is not None and token != w.token:
                errors.append("key %s: final token %s differs from its writer's %r" % (key, token, w))
            if max_acked is not None and w.token < max_acked:
                errors.append("key %s: final value from %r, below acknowledged token %d"
                              % (key, w, max_acked))
            if last_acked is not None and w is not last_acked and w.result == "ok" \
                    and w.complete_t < last_acked.invoke_t:
                errors.append("key %s: acknowledged %r lost; final value is the older %r"
                              % (key, last_acked, w))
            if last_acked is not None and w is not last_acked and w.result == "unknown" \
                    and w.token < last_acked.token:
                errors.append("key %s: acknowledged %r lost to unknown lower %r" % (key, last_acked, w))

        # Fences.
        for lock, tok in (fences_state or {}).items():
            acked = [o.token for o in by_lock.get(lock, []) if o.result == "ok" and o.token is not None]
            if acked and (tok is None or tok < max(acked)):
                errors.append("lock %s: fence %s below acknowledged token %d" % (lock, tok, max(acked)))
            attempted = [o.token for o in by_lock.get(lock, []) if o.result != "fail" and o.token is not None]
            if tok is not None and attempted and tok > max(attempted):
                errors.append("lock %s: fence %s above every non-rejected token %d" % (lock, tok, max(attempted)))
        return errors

    def assert_ok(self, keys_state, fences_state=None):
        errs = self.check(keys_state, fences_state)
        if errs:
            raise CheckFailed("history check failed (%s):\n  %s" % (self.summary(), "\n  ".join(errs[:30])))


def read_state(proxy, keys=(), locks=()):
    """Reads final state through a proxy for History.check."""
    keys_state, fences_state = {}, {}
    with proxy.client() as c:
        for k in keys:
            r = c.get(k)
            if r.status == 404:
                keys_state[k] = None
            elif r.status == 200:
                t = r.header("Fencing-Token")
                keys_state[k] = (r.body, int(t) if t is not None else None)
            else:
                raise CheckFailed("GET %s: %r" % (k, r))
        for l in locks:
            r = c.fence(l)
            if r.status == 404:
                fences_state[l] = None
            elif r.status == 200:
                fences_state[l] = r.json()["token"]
            else:
                raise CheckFailed("GET fence %s: %r" % (l, r))
    return keys_state, fences_state


# ---------------------------------------------------------------------------
# Assertions for contract responses
# ---------------------------------------------------------------------------

def expect_error(resp, status, code, what=""):
    """Asserts an error response per docs/api.md#errors: status, JSON body with error=code and
    a string message, Content-Type application/json. Returns the parsed body."""
    prefix = (what + ": ") if what else ""
    if resp.status != status:
        raise CheckFailed("%sexpected %d %s, got %d %r" % (prefix, status, code, resp.status, resp.body[:300]))
    ct = (resp.header("Content-Type") or "").split(";")[0].strip().lower()
    check(ct == "application/json", "%s%d: Content-Type %r, want application/json" % (prefix, status, ct))
    body = resp.json()
    check(isinstance(body, dict), "%serror body is not an object: %r" % (prefix, body))
    if body.get("error") != code:
        raise CheckFailed("%sexpected error %r, got %r" % (prefix, code, body))
    check(isinstance(body.get("message"), str) and body["message"],
          "%serror body has no message: %r" % (prefix, body))
    return body


def expect_status(resp, status, what=""):
    if resp.status != status:
        raise CheckFailed("%sexpected %d, got %d %r" % ((what + ": ") if what else "", status,
                                                       resp.status, resp.body[:300]))
    return resp


# ---------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------

def _collect(ns):
    tests = [(n, f) for n, f in ns.items() if n.startswith("test_") and callable(f)]
    tests.sort(key=lambda nf: nf[1].__code__.co_firstlineno)
    return tests


def _fail_on_spec_violations():
    found = take_spec_violations()
    if found:
        raise CheckFailed("%d answer(s) not as docs/openapi.yaml says:\n  %s" % (
            len(found), "\n  ".join(found[:20])))


def main(ns, needs_binary=True, after_each=None):
    """Runs every test_* function of module namespace `ns` in source order. A test
    with a parameter named `store` runs once per store from stores() (each gets a
    fresh one); other tests run once; after_each() runs after every test. Prints a line
    per test and "N passed, N failed, N skipped"; exits 1 on failure, 77 when everything
    was skipped."""
    global _current_test
    if needs_binary:
        require_binary()
    flt = os.environ.get("FK_TEST_FILTER") or (sys.argv[1] if len(sys.argv) > 1 else "")
    kinds = store_kinds()
    if services_required() and "postgres" not in kinds:
        missing("the postgres store (FK_TEST_PG_URL unset)")
    passed = failed = skipped = 0
    failures = []
    t_all = time.monotonic()
    for name, fn in _collect(ns):
        params = inspect.signature(fn).parameters
        runs = []
        if "store" in params:
            for kind in kinds:
                runs.append(("%s[%s]" % (name, kind), kind))
        else:
            runs.append((name, None))
        for label, kind in runs:
            if flt and flt not in label:
                continue
            t0 = time.monotonic()
            _current_test = label
            take_spec_violations()
            try:
                if kind is None:
                    fn()
                else:
                    st = file_store() if kind == "file" else pg_store()
                    fn(st)
                _fail_on_spec_violations()
                dt = time.monotonic() - t0
                print("PASS %s (%.1fs)" % (label, dt), flush=True)
                passed += 1
            except Skip as e:
                print("SKIP %s: %s" % (label, e), flush=True)
                skipped += 1
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                dt = time.monotonic() - t0
                failed += 1
                failures.append(label)
                print("FAIL %s (%.1fs)" % (label, dt), flush=True)
                traceback.print_exc(file=sys.stdout)
                for v in take_spec_violations()[:20]:
                    print("  answer not as docs/openapi.yaml says: " + v)
                for p in list(_live_proxies):
                    tail = p.stderr_text()[-2000:]
                    if tail:
                        print("--- stderr of fencekeeper pid %s (last 2000 bytes):\n%s---"
                              % (p.pid, tail))
                sys.stdout.flush()
            finally:
                _current_test = None
                kill_all_proxies()
                if after_each:
                    after_each()
    print("%d passed, %d failed, %d skipped (%.1fs)" % (passed, failed, skipped, time.monotonic() - t_all))
    if failures:
        print("failed: " + ", ".join(failures))
    _drop_pg_schemas()
    _remove_tmp()
    if failed:
        sys.exit(1)
    if passed == 0 and skipped > 0:
        sys.exit(SKIP_EXIT)
    sys.exit(0)


# ---------------------------------------------------------------------------
# Documentation examples, run as written (README.md: every command it shows works)
# ---------------------------------------------------------------------------

def doc_block(path, marker):
    """The fenced blocks between <!-- MARKER ... --> and <!-- /MARKER --> in a doc, as
    (language, text) in order."""
    text = open(os.path.join(REPO, path)).read()
    m = re.search(r"<!-- %s[^>]*-->(.*?)<!-- /%s -->" % (marker, marker), text, re.S)
    check(m is not None, "no %s block in %s" % (marker, path))
    return re.findall(r"```(\w+)\n(.*?)```", m.group(1), re.S)


def console_steps(text):
    """(command, expected output) pairs of a console block: a command starts with "$ " and
    runs until its quotes close and no line ends with a backslash."""
    lines = text.splitlines()
    steps, i = [], 0
    while i < len(lines):
        check(lines[i].startswith("$ "), "console block: %r is not a command" % lines[i])
        cmd = lines[i][2:]
        i += 1
        while True:
            try:
                shlex.split(cmd)
                complete = not cmd.endswith("\\")
            except ValueError:
                complete = False
            if complete:
                break
            cmd += "\n" + lines[i]
            i += 1
        out = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i])
            i += 1
        steps.append((cmd, "\n".join(out)))
    return steps


def run_console_block(p, text, curl, exact=False, masks=()):
    """Runs a doc's console block against proxy `p` (only the address changed) and checks
    each command's output: JSON compared as JSON, anything else as text. exact: the
    output byte for byte as shown (curl -i's CRLFs read as LFs, trailing newlines aside),
    after replacing what matches a regex of `masks` (a request id, a time) in both. Returns
    [(command, output)] as they ran."""
    ran = []
    for cmd, expected in console_steps(text):
        cmd = cmd.replace("curl ", curl + " -sS ", 1).replace(
            "127.0.0.1:8080", "%s:%d" % (p.host, p.port))
        got = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=30)
        eq(got.returncode, 0, "%s: exit status (%s)" % (cmd, got.stderr))
        out = got.stdout.replace("\r\n", "\n")
        ran.append((cmd, out))
        if exact:
            def masked(t):
                for m in masks:
                    t = re.sub(m, "<masked>", t)
                return t.rstrip("\n")
            eq(masked(out), masked(expected), "the output of %s, as the docs show it" % cmd)
            continue
        try:
            want = json.loads(expected)
        except ValueError:
            eq(out.strip(), expected.strip(), "the output of %s" % cmd)
        else:
            eq(json.loads(out), want, "the output of %s" % cmd)
    return ran


def parallel(fn, n, *args):
    """Runs fn(i, *args) in n threads; returns the list of results (exceptions are
    re-raised in the caller after all threads finished)."""
    results = [None] * n
    errors = []

    def run(i):
        try:
            results[i] = fn(i, *args)
        except BaseException as e:
            errors.append((i, e, traceback.format_exc()))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise CheckFailed("thread %d failed: %s" % (errors[0][0], errors[0][2]))
    return results
