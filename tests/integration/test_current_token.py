#!/usr/bin/env python3
"""`current_token` in a 409 tells the truth (issue 44; docs/api.md, "current_token"),
through real processes, on both stores.

One proxy: a refusal's current_token is the effective fence at a moment of the request,
so it is never below a fence the client had already seen. A writer advances a lock's
fence as fast as it can (PUTs of a key with tokens 1, 2, 3, ...) while readers loop: read
the fence one way (the key's Fencing-Token from a GET, or GET /v1/fences/{lock}), then
send a stale write (token 0) and require its current_token to be at least what they just
read. Before the fix the proxy's fence cache learned a fence after the commit was visible
to readers, and answered such a refusal with the fence before it.

Two proxies on one Postgres: each has its own cache, so the promise is weaker, and the
same loop checks it: token < current_token <= the fence (at most the highest token the
writer has sent).

Seconds per run: FK_CURRENT_TOKEN_S (default 4).
"""

import os
import threading
import time

import fk
from fk import check

SECONDS = float(os.environ.get("FK_CURRENT_TOKEN_S") or 4)


def loop(writer_proxy, reader_proxies, exact):
    lock = "ct/" + fk.rand_name(8)
    key = lock + "/k"
    sent = [0]           # the highest token the writer has sent
    stop = threading.Event()
    errors = []
    counts = {"refusals": 0, "behind": 0}
    mu = threading.Lock()

    def writer():
        c = writer_proxy.client(timeout=20)
        t = 0
        while not stop.is_set():
            t += 1
            with mu:
                sent[0] = t
            r = c.put(key, b"v%d" % t, token=t, lock=lock)
            if r.status not in (200, 201):
                errors.append("writer: token %d got %d %s" % (t, r.status, r.body[:100]))
                return
        c.close()

    def reader(i, proxy):
        c = proxy.client(timeout=20)
        while not stop.is_set():
            if i % 2:
                g = c.get(key)
                if g.status != 200:
                    continue
                seen = int(g.header("Fencing-Token"))
            else:
                g = c.fence(lock)
                if g.status != 200:
                    continue
                seen = g.json()["token"]
            r = c.put(key, b"zombie", token=0, lock=lock)
            with mu:
                top = sent[0]
            if r.status != 409 or r.json().get("error") != "stale_token":
                errors.append("stale write got %d %s" % (r.status, r.body[:100]))
                return
            cur = r.json()["current_token"]
            with mu:
                counts["refusals"] += 1
                if cur < seen:
                    counts["behind"] += 1
            if cur <= 0 or cur > top:
                errors.append("current_token %d outside (0, %d]" % (cur, top))
            if exact and cur < seen:
                errors.append("current_token %d below the fence %d read just before" % (cur, seen))
        c.close()

    threads = [threading.Thread(target=writer)]
    threads += [threading.Thread(target=reader, args=(i, reader_proxies[i % len(reader_proxies)]))
                for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()
    print("  %d tokens written, %d refusals, %d with current_token below a fence read before"
          % (sent[0], counts["refusals"], counts["behind"]))
    check(counts["refusals"] > 50, "too few refusals to tell: %r" % counts)
    check(not errors, "%d violations, e.g.:\n  %s" % (len(errors), "\n  ".join(errors[:10])))


def test_one_proxy_reports_the_fence_it_refused_with(store):
    p = store.start()
    loop(p, [p], exact=True)


def test_two_proxies_report_a_fence_between_token_and_fence():
    st = fk.pg_store()
    if st is None:
        fk.missing("postgres (FK_TEST_PG_URL)")
        return
    a, b = st.start(), st.start()
    loop(a, [a, b], exact=False)


if __name__ == "__main__":
    fk.main(globals())
