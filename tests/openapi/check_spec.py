#!/usr/bin/env python3
"""docs/openapi.yaml must not disagree with docs/api.md or with the code. Checks:
  - the error codes: the spec's ErrorCode enum, the constants of its error schemas,
    fence/error.cpp's wire names and docs/api.md's error table are one set;
  - each error code appears in the spec only under the status docs/api.md gives it;
  - the routes: docs/api.md's route table and the spec's operations are the same
    (method, path) pairs, and each path's methods are what proxy/router.cpp allows
    (the spec's Allow values);
  - every component is referenced (Redocly's own check cannot see x-fencekeeper-unrouted);
  - every JSON answer docs/api.md and the README show (after a `$ curl`, or an error in
    a json block) is one the spec documents;
  - the validator the integration tests use (tests/integration/openapi_validate.py)
    accepts documented answers and refuses undocumented ones.
Prints what differs and exits 1, or prints "spec check: ok". Uses python3-yaml and
python3-jsonschema."""

import json
import os
import re
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def read(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return f.read()


def load_validator():
    sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
    import openapi_validate
    return openapi_validate.Spec(os.path.join(REPO, "docs", "openapi.yaml"))


def curl_examples(text):
    """(where, method, target, status or None, body) for each JSON line a `$ curl`
    command in a console block of `text` shows."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        lines = block.replace("\\\n", " ").split("\n")
        cmd = None
        status = None
        open_quote = False
        for line in lines:
            if open_quote:   # a quoted argument over several lines
                cmd += " " + line
                open_quote = cmd.count("'") % 2 == 1
                continue
            if line.startswith("$ "):
                cmd, status = line[2:], None
                open_quote = cmd.count("'") % 2 == 1
                continue
            if cmd is None or not cmd.startswith("curl "):
                continue
            m = re.match(r"HTTP/1\.[01] (\d{3})", line)
            if m:
                status = int(m.group(1))
            if not line.startswith("{"):
                continue
            method = re.search(r"-X (\w+)", cmd)
            method = method.group(1) if method else ("POST" if re.search(r" -d |--data", cmd) else "GET")
            url = re.search(r"'?(?:https?://)?(?:127\.0\.0\.1|localhost):\d+(/[^' ]*)'?", cmd)
            out.append((cmd[:60], method, url.group(1), status, line))
    return out


def check_examples(api_status):
    """Every JSON answer docs/api.md and the README show is one the spec documents."""
    problems = []
    spec = load_validator()
    shown = 0
    for doc in ("docs/api.md", "README.md"):
        text = read(doc)
        for where, method, target, status, line in curl_examples(text):
            body = json.loads(line)
            if status is None:
                status = int(api_status.get(body.get("error"), 200)) if isinstance(body, dict) else 200
            p = spec.check(method, target, status, None, line.encode())
            shown += 1
            if p:
                problems.append("%s: the example of `%s`: %s" % (doc, where, p))
        for block in re.findall(r"```json\n(.*?)```", text, re.S):
            for line in block.strip().split("\n"):
                try:
                    value = json.loads(line)
                except ValueError:
                    continue   # a sketch such as {"error": "CODE", ...}
                if isinstance(value, dict) and "error" in value:
                    shown += 1
                    p = spec.error_problem(value)
                    if p:
                        problems.append("%s: the error example %s: %s" % (doc, line[:80], p))
    if shown < 20:
        problems.append("only %d examples found in docs/api.md and the README" % shown)
    return problems


def self_test():
    """The validator the integration tests use must refuse what the spec does not say."""
    spec = load_validator()
    rid = ("X-Request-Id", "t")
    js = ("Content-Type", "application/json")
    put = '{"key":"a","lock":"a","token":5,"version":1}'
    good = [("PUT", "/v1/resources/a", 201, [rid, js, ("ETag", '"1"')], put),
            ("GET", "/nope", 404, [rid, js], '{"error":"not_found","message":"m"}'),
            # A stored body is any bytes, also when it was stored as JSON.
            ("GET", "/v1/resources/a", 200,
             [rid, js, ("ETag", '"1"'), ("Fencing-Token", "5"), ("Fencing-Lock", "a")], '{"a":1}'),
            ("POST", "/v1/resources/a", 405, [rid, js, ("Allow", "GET, HEAD, PUT, DELETE")],
             '{"error":"method_not_allowed","message":"m"}')]
    bad = [("PUT", "/v1/resources/a", 201, [rid, js, ("ETag", '"1"')], put[:-1] + ',"x":1}'),
           ("PUT", "/v1/resources/a", 201, [rid, js], put),
           ("PUT", "/v1/resources/a", 201, [js, ("ETag", '"1"')], put),
           ("PUT", "/v1/resources/a", 404, [rid, js], '{"error":"not_found","message":"m"}'),
           ("PUT", "/v1/resources/a", 409, [rid, js], '{"error":"stale","message":"m"}'),
           ("PUT", "/v1/resources/a", 400, [rid, js], '{"error":"invalid_request"}'),
           ("GET", "/healthz", 401, [rid, js], '{"error":"unauthorized","message":"m"}'),
           ("GET", "/metrics", 200, [rid, js], '{}'),
           ("POST", "/v1/transactions", 409, [rid, js],
            '{"current_token":2,"error":"stale_token","lock":"l","message":"m","token":1}')]
    problems = []
    for m, t, st, h, b in good:
        p = spec.check(m, t, st, h, b.encode())
        if p:
            problems.append("self-test: a documented answer refused: " + p)
    for m, t, st, h, b in bad:
        if spec.check(m, t, st, h, b.encode()) is None:
            problems.append("self-test: an undocumented answer passed: %s %s %d %s %s" % (m, t, st, h, b))
    return problems


def main():
    spec = yaml.safe_load(read("docs/openapi.yaml"))
    api = read("docs/api.md")
    problems = []

    def differ(what, a_name, a, b_name, b):
        if a != b:
            problems.append("%s: only in %s: %s; only in %s: %s" % (
                what, a_name, sorted(a - b) or "-", b_name, sorted(b - a) or "-"))

    def resolve(obj):
        while isinstance(obj, dict) and "$ref" in obj:
            node = spec
            for part in obj["$ref"].lstrip("#/").split("/"):
                node = node[part.replace("~1", "/")]
            obj = node
        return obj

    # --- error codes ------------------------------------------------------------------
    enum = set(spec["components"]["schemas"]["ErrorCode"]["enum"])
    error_cpp = read("fence/error.cpp")
    to_string = error_cpp.split("to_string(errc e)", 1)[1].split("\n}\n", 1)[0]
    code_names = set(re.findall(r'return "(\w+)";', to_string)) - {"ok"}
    errors_section = api.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    api_status = {}
    for status, code in re.findall(r"^\| (\d{3}) \| `(\w+)` \|", errors_section, re.M):
        api_status[code] = status
    consts = {}
    for name, schema in spec["components"]["schemas"].items():
        err = (schema.get("properties") or {}).get("error")
        if err is not None:
            consts[name] = err.get("const")
            if err.get("const") not in enum:
                problems.append("schema %s: error %r is not in ErrorCode" % (name, err.get("const")))
    differ("error codes", "ErrorCode", enum, "fence/error.cpp", code_names)
    differ("error codes", "ErrorCode", enum, "docs/api.md#errors", set(api_status))
    differ("error codes", "ErrorCode", enum, "the error schemas", set(consts.values()))

    # Which codes each status carries, over every response the spec has.
    def codes_of(schema):
        schema = resolve(schema)
        out = set()
        for sub in schema.get("oneOf", []):
            out |= codes_of(sub)
        err = (schema.get("properties") or {}).get("error")
        if err is not None:
            out.add(err.get("const"))
        return out

    responses = []
    for template, item in spec["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "responses" in op:
                responses += [("%s %s" % (method.upper(), template), s, r)
                              for s, r in op["responses"].items()]
    for kind, part in spec["x-fencekeeper-unrouted"].items():
        responses += [(kind, s, r) for s, r in part["responses"].items()]
    for where, status, r in responses:
        media = (resolve(r).get("content") or {}).get("application/json")
        if not media:
            continue
        for code in codes_of(media["schema"]):
            if api_status.get(code) != status:
                problems.append("%s: %s carries %s, which docs/api.md#errors gives status %s"
                                % (where, status, code, api_status.get(code)))

    # --- routes -----------------------------------------------------------------------
    routes_section = api.split("\n## Routes\n", 1)[1].split("\n<a id=", 1)[0]
    api_routes = set()
    for cell in re.findall(r"^\| (`[^|]+`) \|", routes_section, re.M):
        methods = re.findall(r"`?\b([A-Z]+)\b`?,? ", cell.split("/")[0] + " ")
        path = re.search(r"(/[^ `?]*)", cell).group(1)
        for m in methods:
            api_routes.add((m, path))
    spec_routes = {(m.upper(), t) for t, item in spec["paths"].items()
                   for m in item if m != "parameters"}
    differ("routes", "docs/api.md#routes", api_routes, "docs/openapi.yaml", spec_routes)

    router = read("proxy/router.cpp")
    allows = set(re.findall(r'constexpr std::string_view allow_\w+ = "([^"]+)";', router))
    spec_allow = set(spec["components"]["headers"]["Allow"]["schema"]["enum"])
    differ("Allow values", "proxy/router.cpp", allows, "the Allow header", spec_allow)
    allow_sets = [set(a.split(", ")) for a in allows]
    for template, item in spec["paths"].items():
        methods = {m.upper() for m in item if m != "parameters"}
        if methods not in allow_sets:
            problems.append("%s: methods %s are none of proxy/router.cpp's Allow values"
                            % (template, sorted(methods)))

    # --- every component used -----------------------------------------------------------
    text = read("docs/openapi.yaml")
    for kind, items in spec["components"].items():
        for name in items:
            if kind == "schemas" and name == "ErrorCode":
                continue   # the error schemas' constants, checked above
            if kind == "securitySchemes":
                used = re.search(r"^\s+- ?%s: \[\]" % re.escape(name), text, re.M)
            else:
                used = "'#/components/%s/%s'" % (kind, name) in text
            if not used:
                problems.append("components/%s/%s is never used" % (kind, name))

    problems += check_examples(api_status)
    problems += self_test()

    for p in problems:
        print("spec check: " + p)
    if problems:
        return 1
    print("spec check: ok (%d error codes, %d routes, the docs' examples, the validator)"
          % (len(enum), len(spec_routes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
