"""The README's demo, run exactly as the README shows it: `bash scripts/demo.sh` from the
repository root, at its default pacing (no DEMO_FAST: the pauses meant for reading stay
in, about 15 s), against the fencekeeper binary under test (FENCEKEEPER_BIN).

  test_demo_default_pacing: the demo exits 0; A, frozen while it holds the lock, writes
                            only after it is woken, and that write gets 409 stale_token;
                            B's write gets 201; the stored report the demo prints is B's
                            (its token, its content); the demo removes its temp dir.

The demo starts its own Redis and fencekeeper, so it needs redis-server, redis-cli and
curl on PATH (it would install them with apt-get; this test refuses to, and counts a
missing one as a missing service).
"""
import os
import re
import shutil
import signal
import subprocess

import fk

HANG_GUARD_S = 180  # the demo takes ~15 s; this only stops a hung run


def _need_tools():
    missing = [t for t in ("redis-server", "redis-cli", "curl") if shutil.which(t) is None]
    if not missing:
        return
    if fk.services_required():
        fk.fail("the demo needs %s on PATH (FK_REQUIRE_SERVICES=1)" % ", ".join(missing))
    raise fk.Skip("the demo needs %s on PATH" % ", ".join(missing))


def _run_demo():
    env = dict(os.environ)
    env.pop("DEMO_FAST", None)
    env["FENCEKEEPER_BIN"] = fk.require_binary()
    # Its own session, so a hung demo and everything it started can be stopped as a group.
    p = subprocess.Popen(["bash", "scripts/demo.sh"], cwd=fk.REPO, env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)  # the demo's trap stops its Redis, fencekeeper, jobs
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        fk.fail("demo still running after %d s; output:\n%s\n%s"
                % (HANG_GUARD_S, out.decode(errors="replace"), err.decode(errors="replace")))
    return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _line_index(lines, pattern, what):
    for i, line in enumerate(lines):
        if re.search(pattern, line):
            return i
    fk.fail("demo output has no line for %s (/%s/)" % (what, pattern))


def test_demo_default_pacing():
    _need_tools()
    rc, out, err = _run_demo()
    print(out, end="")
    if err:
        print("--- demo stderr:\n" + err, end="")
    fk.eq(rc, 0, "demo exit status")
    fk.check("No such process" not in err, "the demo tried to signal a process that had exited")

    lines = out.splitlines()
    # The story's steps, in the README's order.
    steps = [_line_index(lines, r"^== .*A starts first and takes the lock", "A takes the lock"),
             _line_index(lines, r"^== .*A is frozen \(SIGSTOP\)", "A frozen"),
             _line_index(lines, r"^== B starts and waits for the lock", "B starts"),
             _line_index(lines, r"^== C starts", "C starts"),
             _line_index(lines, r"^== A wakes up \(SIGCONT\)", "A wakes up"),
             _line_index(lines, r"^== The report in storage", "the stored report")]
    fk.eq(steps, sorted(steps), "order of the demo's steps")
    woken, storage = steps[4], steps[5]

    def token(name):
        m = re.search(r'^\s*\[%s\] I have the lock "daily-report", fencing token (\d+)$' % name,
                      out, re.M)
        fk.check(m is not None, "no token line for instance %s" % name)
        return int(m.group(1))

    a_tok, b_tok = token("A"), token("B")
    fk.check(a_tok < b_tok, "B's token %d must be above A's %d" % (b_tok, a_tok))

    # A stored nothing before it was frozen: its write came after SIGCONT, and was refused.
    a_store = _line_index(lines, r"^\s*\[A\] done; storing the report", "A storing")
    fk.check(a_store > woken, "A wrote before it was frozen:\n" + "\n".join(lines[:a_store + 2]))
    a_answer = _line_index(lines, r"^\s*\[A\] fencekeeper answered", "A's answer")
    fk.check(re.search(r"answered 409: .*\"stale_token\"", lines[a_answer]) is not None,
             "A's write was not refused with 409 stale_token: %r" % lines[a_answer])
    b_answer = _line_index(lines, r"^\s*\[B\] fencekeeper answered", "B's answer")
    fk.check(re.search(r"answered 201: ", lines[b_answer]) is not None,
             "B's write was not accepted: %r" % lines[b_answer])
    _line_index(lines, r"fencekeeper rejected A's write: 409 stale_token\. A sent token %d"
                % a_tok, "the 409 verdict")

    # The report the demo read back from fencekeeper after everything: B's.
    stored = [l[len("   | "):] for l in lines[storage:] if l.startswith("   | ")]
    fk.eq(stored, ["day,revenue,made_by", "2026-11-29,1234.56,instance B (token %d)" % b_tok],
          "stored report")
    _line_index(lines, r"The report is B's \(written with token %d\)" % b_tok, "B's report")

    m = re.search(r"file store in (/tmp/fencekeeper-demo\.[A-Za-z0-9]+)/data", out)
    fk.check(m is not None, "the demo did not name its temp dir")
    fk.check(not os.path.exists(m.group(1)), "the demo left %s behind" % m.group(1))


if __name__ == "__main__":
    fk.main(globals())
