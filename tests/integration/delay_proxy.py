"""A TCP proxy on loopback that hands every chunk on a fixed time after it was read, in both
directions: a database "on another host" for tests and measurements (this machine has no
netem). Threads, not asyncio: a thread's sleep is precise to well under a millisecond,
and the event loop's timers round up to whole milliseconds. cut() makes it drop
everything from then on, both ways, with the connections left open: a partition.

As a module: with DelayProxy("127.0.0.1", 5432, 0.005) as p: ... connect to p.port.
From the shell: python3 tests/integration/delay_proxy.py LISTEN_PORT TARGET_PORT ONE_WAY_MS
"""

import collections
import socket
import sys
import threading
import time


class DelayProxy:
    def __init__(self, target_host, target_port, one_way_s, listen_port=0):
        self.target = (target_host, target_port)
        self.delay = one_way_s
        self._listener = socket.create_server(("127.0.0.1", listen_port))
        self.port = self._listener.getsockname()[1]
        self._sockets = []
        self._lock = threading.Lock()
        self._closed = False
        self._cut = threading.Event()

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self):
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            for s in self._sockets:
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self):
        """From now on nothing more is handed on, in either direction, not even the end of
        a stream; the connections stay open. To either side the other just went quiet."""
        self._cut.set()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            self._pump(client, server)
            self._pump(server, client)

    def _pump(self, src, dst):
        """src → dst, each chunk delivered `delay` after it was read, in order."""
        queue = collections.deque()
        ready = threading.Condition()

        def read():
            while True:
                try:
                    data = src.recv(1 << 16)
                except OSError:
                    data = b""
                if self._cut.is_set():
                    if not data:
                        return
                    continue
                with ready:
                    queue.append((time.monotonic() + self.delay, data))
                    ready.notify()
                if not data:
                    return

        def write():
            while True:
                with ready:
                    while not queue:
                        ready.wait()
                    due, data = queue.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if self._cut.is_set():
                    return
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()


if __name__ == "__main__":
    listen, target, one_way_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    proxy = DelayProxy("127.0.0.1", target, one_way_ms / 1000, listen_port=listen).start()
    print("delay proxy on 127.0.0.1:%d -> 127.0.0.1:%d, %.3f ms each way"
          % (proxy.port, target, one_way_ms), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.stop()
