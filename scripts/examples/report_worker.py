#!/usr/bin/env python3
"""The report job of report-worker.sh in Python (stdlib only): nothing about
scripts/zombie-check.sh is shell-specific. Every write carries the token and lock the
lock recipe gave it; a 409 means a newer holder has the lock, so it stops there."""
import os
import sys
import time
import urllib.error
import urllib.request

base = os.environ["FENCEKEEPER_URL"]
token = os.environ["FENCING_TOKEN"]
lock = os.environ["FENCING_LOCK"]


def put(key, body):
    req = urllib.request.Request(
        "%s/v1/resources/%s" % (base, key), data=body.encode(), method="PUT",
        headers={"Fencing-Token": token, "Fencing-Lock": lock})
    try:
        with urllib.request.urlopen(req, timeout=10):
            pass
    except urllib.error.HTTPError as e:
        if e.code == 409:
            sys.exit("report_worker.py: %s refused, a newer holder has the lock: %s"
                     % (key, e.read().decode(errors="replace")))
        raise


time.sleep(0.1)  # "building the report"
put("reports/%s/daily.csv" % lock,
    "day,revenue,made_by\n2026-11-29,1234.56,pid %d with token %s\n" % (os.getpid(), token))
put("reports/%s/last-run" % lock, "token %s" % token)
