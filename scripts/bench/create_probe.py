#!/usr/bin/env python3
"""create_probe.py DIR BODY_BYTES [N]: the time to create a new file with a body on DIR's
file system, in µs per file (printed alone on stdout).

Each file is opened with O_CREAT | O_EXCL, written and closed, as fencekeeper's file store
creates a new key's body; N (300) files in DIR, which must not exist yet. None is deleted:
deleting them would make later inode allocations on ext4 dearer (bench.sh runs this
between measurements). Python adds a few µs per file, so this is a little high. ext4
places the directory where it likes: a file here can cost far more (or less) than one in
the store's own directories at the same moment, so this indicates the file system's
state; it bounds nothing.
"""
import os
import sys
import time

d, body = sys.argv[1], b"x" * int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 300
os.makedirs(d)
t = time.perf_counter()
for i in range(n):
    fd = os.open(f"{d}/k-{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, body)
    os.close(fd)
print(f"{(time.perf_counter() - t) / n * 1e6:.1f}")
