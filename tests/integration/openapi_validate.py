"""Checks fencekeeper's answers against docs/openapi.yaml.

fk.py calls check() for every response its clients (Client, RawConn) read: the request's
method and target pick the spec's operation (path template, then method), the status
picks the response object, and then
  - a status the operation does not list fails,
  - a header the response object marks required must be there, and every documented
    header that is there must match its schema,
  - a JSON body must validate against the media type's schema (Draft 2020-12, as in
    OpenAPI 3.1): additionalProperties: false on every result and error object, so an
    undocumented field or error code fails too,
  - a body of a media type the response does not list fails.
Requests that match no operation are checked against the root extension
x-fencekeeper-unrouted: an unknown path, a method the path does not list, and a request
whose head fencekeeper (or this module) could not parse, when the route is unknown.

Uses python3-yaml and python3-jsonschema (Debian; scripts/install-deps.sh test).
"""

import json
import os
import re
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC_PATH = os.path.join(HERE, "..", "..", "docs", "openapi.yaml")

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def origin_path(target):
    """The path of a request target as the router sees it (proxy/router.cpp): absolute
    form reduced to origin form, the query string cut off, nothing decoded."""
    low = target[:8].lower()
    for scheme in ("http://", "https://"):
        if low.startswith(scheme):
            rest = target[len(scheme):]
            m = re.search(r"[/?]", rest)
            target = "/" if m is None else rest[m.start():]
            break
    return target.split("?", 1)[0]


class Spec:
    def __init__(self, path=SPEC_PATH):
        import yaml
        import jsonschema
        self._jsonschema = jsonschema
        with open(path, encoding="utf-8") as f:
            self.doc = yaml.safe_load(f)
        self.routes = []
        for template, item in self.doc["paths"].items():
            # A parameter takes the rest of the path, '/' included, possibly empty: the
            # router matches the prefix, then decodes and checks the name (400 if bad).
            rx = "^" + re.sub(r"\\\{\w+\\\}", "(.*)", re.escape(template)) + "$"
            self.routes.append((re.compile(rx), template, item))
        self.unrouted = self.doc["x-fencekeeper-unrouted"]
        self._validators = {}
        self._lock = threading.Lock()

    def resolve(self, obj):
        while isinstance(obj, dict) and "$ref" in obj and len(obj) == 1:
            node = self.doc
            for part in obj["$ref"].lstrip("#/").split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
            obj = node
        return obj

    def _unrouted(self, *kinds):
        out = {}
        for kind in kinds:
            for status, r in self.unrouted[kind]["responses"].items():
                out.setdefault(status, []).append(r)
        return out

    def responses_for(self, method, target):
        """(what, {status: [response objects]}) for a request; method and target None
        when the request is unknown (its head could not be parsed)."""
        if method is None or target is None:
            return ("a request whose head was not parsed",
                    self._unrouted("unparsable-request", "unknown-path", "method-not-allowed"))
        path = origin_path(target)
        for rx, template, item in self.routes:
            if rx.match(path):
                op = item.get(method.lower()) if method.lower() in _METHODS else None
                if op is None:
                    return ("%s %s (method not listed)" % (method, template),
                            self._unrouted("method-not-allowed"))
                return ("%s %s" % (method, template),
                        {s: [r] for s, r in op["responses"].items()})
        return ("%s %s (unknown path)" % (method, path), self._unrouted("unknown-path"))

    def _validator(self, schema):
        key = id(schema)
        with self._lock:
            v = self._validators.get(key)
            if v is None:
                # The schema with the spec's components beside it, so that its
                # "#/components/..." references resolve.
                root = dict(schema)
                root["components"] = self.doc["components"]
                cls = self._jsonschema.Draft202012Validator
                cls.check_schema(root)
                v = self._validators[key] = (cls(root), schema)
        return v[0]

    def error_problem(self, value):
        """None when `value` is an error body some error schema of the spec accepts."""
        code = value.get("error") if isinstance(value, dict) else None
        schemas = [{"$ref": "#/components/schemas/" + name}
                   for name, s in self.doc["components"]["schemas"].items()
                   if ((s.get("properties") or {}).get("error") or {}).get("const") == code]
        if not schemas:
            return "error code %r is not in the spec" % (code,)
        return self._schema_problem({"anyOf": schemas}, value)

    def _schema_problem(self, schema, value):
        v = self._validator(schema)
        errors = list(v.iter_errors(value))
        if not errors:
            return None
        best = self._jsonschema.exceptions.best_match(errors)
        where = "/".join(str(p) for p in best.absolute_path) or "(body)"
        return "%s: %s" % (where, best.message)

    def _header_problem(self, name, schema, value):
        schema = self.resolve(schema)
        if schema.get("type") == "integer":
            if not re.fullmatch(r"[ \t]*[0-9]+[ \t]*", value):
                return "header %s: %r is not an integer" % (name, value)
            value = int(value)
        p = self._schema_problem(schema, value)
        return None if p is None else "header %s: %r: %s" % (name, value, p.split(": ", 1)[1])

    def _check_one(self, r, status, headers, body, head):
        r = self.resolve(r)
        if headers is None:   # a body shown without its headers (a doc's example)
            headers = [("Content-Type", "application/json")]
            documented = {}
        else:
            documented = r.get("headers") or {}
        for name, h in documented.items():
            h = self.resolve(h)
            values = [v for k, v in headers if k.lower() == name.lower()]
            if not values:
                if h.get("required"):
                    return "required header %s missing" % name
                continue
            for v in values:
                p = self._header_problem(name, h.get("schema", {}), v)
                if p:
                    return p
        content = r.get("content")
        ctype = ""
        for k, v in headers:
            if k.lower() == "content-type":
                ctype = v.split(";")[0].strip().lower()
        if status in (204, 304):
            return "a body with %d" % status if body else None
        if not content:
            return "an undocumented body (%s)" % (ctype or "no Content-Type") if body else None
        media_type = ctype if ctype in content else "*/*"
        media = content.get(media_type)
        if media is None:
            return "Content-Type %r is not documented (%s)" % (ctype, ", ".join(content))
        if head:
            return None   # a HEAD answer has no body to check
        if media_type != "application/json" or "schema" not in media:
            return None   # a stored body (whatever its type), or the metrics text
        try:
            value = json.loads(body.decode("utf-8"))
        except Exception as e:
            return "the body is not JSON (%s): %r" % (e, body[:200])
        return self._schema_problem(media["schema"], value)

    def check(self, method, target, status, headers, body, head=False):
        """None when the answer is what the spec documents, else why not. headers None:
        only the status and the JSON body are checked."""
        if 100 <= status < 200:
            return None   # 100 Continue: the final answer follows
        what, responses = self.responses_for(method, target)
        candidates = responses.get(str(status))
        if not candidates:
            return "%s: status %d is not documented (documented: %s)" % (
                what, status, ", ".join(sorted(responses)))
        problems = []
        for r in candidates:
            p = self._check_one(r, status, headers, body, head)
            if p is None:
                return None
            problems.append(p)
        return "%s -> %d: %s; body %r" % (what, status, problems[0], body[:300])


class RequestStream:
    """Follows the bytes a RawConn sends and yields (method, target) for each request
    head in them, in order, so that each answer read can be matched to its request.
    Framing follows Content-Length and chunked bodies; anything it cannot follow (a
    malformed head, ambiguous framing) yields (None, None) once and stops: fencekeeper
    answers such a request and closes the connection."""

    _REQUEST_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP/[0-9]\.[0-9]")

    def __init__(self):
        self.buf = b""
        self.state = "head"
        self.remaining = 0
        self.pending = []
        self.done = False

    def _give_up(self):
        self.pending.append((None, None))
        self.done = True

    def feed(self, data):
        if self.done:
            return
        self.buf += data
        while not self.done:
            if self.state == "head":
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buf) > 1 << 20:
                        self._give_up()
                    return
                head, self.buf = self.buf[:end], self.buf[end + 4:]
                lines = head.split(b"\r\n")
                m = self._REQUEST_LINE.fullmatch(lines[0])
                if not m:
                    self._give_up()
                    return
                self.pending.append((m.group(1).decode("latin-1"), m.group(2).decode("latin-1")))
                cl, te = [], []
                for line in lines[1:]:
                    name, sep, value = line.partition(b":")
                    if not sep:
                        self.done = True
                        return
                    name = name.strip().lower()
                    if name == b"content-length":
                        cl.append(value.strip())
                    elif name == b"transfer-encoding":
                        te.append(value.strip().lower())
                if te and not cl and te == [b"chunked"]:
                    self.state = "chunk-size"
                elif cl and not te and len(cl) == 1 and cl[0].isdigit():
                    self.remaining = int(cl[0])
                    self.state = "body" if self.remaining else "head"
                elif not cl and not te:
                    self.state = "head"
                else:
                    self.done = True   # refused framing: the server closes
                    return
            elif self.state == "body":
                n = min(self.remaining, len(self.buf))
                self.buf, self.remaining = self.buf[n:], self.remaining - n
                if self.remaining:
                    return
                self.state = "head"
            elif self.state == "chunk-size":
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                line, self.buf = self.buf[:end], self.buf[end + 2:]
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.done = True
                    return
                if size == 0:
                    self.state = "trailers"
                else:
                    self.remaining = size + 2
                    self.state = "chunk-data"
            elif self.state == "chunk-data":
                n = min(self.remaining, len(self.buf))
                self.buf, self.remaining = self.buf[n:], self.remaining - n
                if self.remaining:
                    return
                self.state = "chunk-size"
            elif self.state == "trailers":
                if self.buf.startswith(b"\r\n"):
                    self.buf = self.buf[2:]
                    self.state = "head"
                    continue
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                self.buf = self.buf[end + 4:]
                self.state = "head"

    def next_request(self):
        """The (method, target) of the next request to be answered; (None, None) when
        unknown."""
        return self.pending.pop(0) if self.pending else (None, None)
