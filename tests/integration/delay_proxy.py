"""A TCP proxy on loopback that hands every chunk on a fixed time after it was read, in both
directions: a database "on another host" for tests and measurements (this machine has no
netem). Threads, not asyncio: a thread's sleep is precise to well under a millisecond,
and the event loop's timers round up to whole milliseconds. cut() makes it drop
everything from then on, both ways, with the connections left open: a partition.
hold_replies() then sever() lose one exchange's answer: what the server sends is kept
back from the moment of hold_replies(), and sever() closes every connection open then,
the answers kept back with them; connections made later are served as usual (a
connection lost after the server committed and before the client heard of it).

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
        self._hold = threading.Event()
        self._hold_for = None
        self._conns = []   # [(client, server, severed Event)] of the open connections

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

    def hold_replies(self, seconds=None):
        """From now on, what the server side sends is kept back, on every connection; what
        clients send still goes through. seconds=None: until sever(); else each chunk is
        handed on that long after it came (an exchange of several round trips still
        proceeds, slowly), until sever()."""
        self._hold_for = seconds
        self._hold.set()

    def sever(self):
        """Closes every connection open now, both of its sockets, dropping what
        hold_replies() kept back: to the client the connection broke before the answer
        came. Connections made after this are served as usual. Returns how many were
        closed."""
        with self._lock:
            conns, self._conns = self._conns, []
            for client, server, severed in conns:
                severed.set()
                for s in (client, server):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    try:
                        s.close()
                    except OSError:
                        pass
            self._hold.clear()
        return len(conns)

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
            severed = threading.Event()
            with self._lock:
                self._sockets += [client, server]
                self._conns.append((client, server, severed))
            self._pump(client, server, severed, replies=False)
            self._pump(server, client, severed, replies=True)

    def _pump(self, src, dst, severed, replies):
        """src → dst, each chunk delivered `delay` after it was read, in order. replies:
        this is the server → client direction, which hold_replies() holds back."""
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
                while replies and self._hold.is_set() and not severed.is_set():
                    if self._hold_for is not None and time.monotonic() >= due + self._hold_for:
                        break
                    time.sleep(0.002)
                if self._cut.is_set() or severed.is_set():
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
