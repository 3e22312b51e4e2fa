"""The node watch: in no-ssh mode, the zerokit of every node keeps a TCP line to node 0's, so that a failure or a
Ctrl-C on any node stops the ranks on every node, and every node's zerokit exits non-zero, within seconds.

Without it nothing ties the nodes together but the training's own rendezvous: a node whose rank dies before the
rendezvous leaves the others waiting in TCPStore for its 30-minute timeout, and a Ctrl-C on one node reaches the
others only if their ranks happen to be inside a collective. torchrun's elastic agent solves this with its
rendezvous store; DeepSpeed's `--no_ssh` mode has nothing.

Node 0's zerokit listens on the watch port (the master port + 1 by default); the others connect to it. Lines:

    worker -> node 0:  hello KEY RANK NODES | ping | exit CODE
    node 0 -> worker:  ping | stop CODE | verdict CODE | reject WHY

A node that exits non-zero, goes silent for `dead_after` seconds or drops its line makes node 0 send `stop` to all
the others; each stops its ranks (SIGTERM, then SIGKILL after --grace) and exits non-zero. When every node has
finished, node 0 sends the verdict (0, or the first failure's code) and each node exits with it.
"""

from __future__ import annotations

import errno
import hashlib
import selectors
import socket
import sys
import threading
import time
from collections.abc import Iterable

from zerokit.errors import BadInput, PreflightFailed

PING_EVERY_S = 1.0
DEAD_AFTER_S = 15.0
"""A node silent this long is taken for dead (its zerokit pings every second)."""
JOIN_TIMEOUT_S = 300.0
"""Every node's zerokit must start within this many seconds of node 0's (and node 0's within this of theirs)."""
LOST = 1
"""The exit code for a job stopped because a node vanished without saying how it ended."""


def job_key(parts: Iterable[object]) -> str:
    """The same short token on every node of one job (master address and port, hosts, script), so that two jobs
    that share a master node cannot join each other's watch."""
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:16]


def _say(message: str) -> None:
    print(f"zerokit launch: {message}", file=sys.stderr, flush=True)


class _Line:
    """One TCP connection read as newline-terminated ASCII lines."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        self.last_seen = time.monotonic()
        self.closed = False

    def send(self, text: str) -> None:
        if self.closed:
            return
        try:
            self.sock.sendall(text.encode("ascii") + b"\n")
        except OSError:
            self.closed = True

    def read(self) -> list[str]:
        try:
            chunk = self.sock.recv(4096)
        except BlockingIOError:
            return []
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return []
        self.last_seen = time.monotonic()
        self.buf += chunk
        if len(self.buf) > 65536:  # nobody sends lines this long: not a zerokit
            self.closed = True
            return []
        *lines, self.buf = self.buf.split(b"\n")
        return [line.decode("ascii", "replace").strip() for line in lines]

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class NodeWatch:
    """One node's end of the watch. `start()` before preflight, `poll()` while the ranks run (a code means: stop
    them now), `finish(code)` when they are gone; it returns the exit code this node's zerokit should end with."""

    def __init__(self, node_rank: int, nodes: int, master_addr: str, port: int, key: str,
                 join_timeout: float = JOIN_TIMEOUT_S, dead_after: float = DEAD_AFTER_S):
        self.node_rank, self.nodes, self.master_addr, self.port, self.key = node_rank, nodes, master_addr, port, key
        self.join_timeout, self.dead_after = join_timeout, dead_after
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.selector = selectors.DefaultSelector()
        self.thread: threading.Thread | None = None
        self.started = 0.0
        # node 0
        self.server: socket.socket | None = None
        self.pending: set[socket.socket] = set()
        self.workers: dict[int, _Line] = {}
        self.exits: dict[int, int] = {}
        self.failure: int | None = None
        self.failure_said = False
        # the other nodes
        self.line: _Line | None = None
        self.stop_code: int | None = None
        self.verdict: int | None = None

    @property
    def coordinator(self) -> bool:
        return self.node_rank == 0

    # ------------------------------------------------------------ start

    def start(self) -> NodeWatch:
        self.started = time.monotonic()
        if self.coordinator:
            self._listen()
        else:
            self._connect()
        self.thread = threading.Thread(target=self._loop, name="zerokit-node-watch", daemon=True)
        self.thread.start()
        return self

    def _listen(self) -> None:
        for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
            try:
                server = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                continue
            try:
                server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                server.bind((address, self.port))
                server.listen(64)
            except OSError as e:
                server.close()
                if family == socket.AF_INET6 and e.errno != errno.EADDRINUSE:  # no usable IPv6: try IPv4
                    continue
                raise PreflightFailed(f"node watch: port {self.port} is in use on this host; pass --watch-port with "
                                      "a free port (the same on every node), or --watch-port 0 to go without") from None
            server.setblocking(False)
            self.server = server
            self.selector.register(server, selectors.EVENT_READ, "accept")
            return
        raise PreflightFailed(f"node watch: cannot listen on port {self.port}")

    def _connect(self) -> None:
        deadline = time.monotonic() + self.join_timeout
        said = False
        while True:
            try:
                sock = socket.create_connection((self.master_addr, self.port), timeout=5)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise PreflightFailed(f"node watch: node 0's zerokit did not answer at {self.master_addr}:"
                                          f"{self.port} within {self.join_timeout:.0f} s ({e.strerror or e}); start "
                                          "zerokit launch --node-rank 0 there, with the same --watch-port") from None
                if not said:
                    _say(f"waiting for node 0's zerokit at {self.master_addr}:{self.port} (node watch)")
                    said = True
                time.sleep(1.0)
        sock.settimeout(None)
        sock.setblocking(False)
        self.line = _Line(sock)
        self.line.send(f"hello {self.key} {self.node_rank} {self.nodes}")
        self.selector.register(sock, selectors.EVENT_READ, "line")

    # ------------------------------------------------------------ the background thread

    def _loop(self) -> None:
        next_ping = 0.0
        while not self.stopped.is_set():
            for sel_key, _ in self.selector.select(timeout=0.2):
                if sel_key.data == "accept":
                    self._accept()
                else:
                    self._read(sel_key.data, sel_key.fileobj)
            now = time.monotonic()
            if now >= next_ping:
                next_ping = now + PING_EVERY_S
                with self.lock:
                    for line in self._lines():
                        line.send("ping")

    def _lines(self) -> list[_Line]:
        return list(self.workers.values()) if self.coordinator else [self.line] if self.line else []

    def _accept(self) -> None:
        assert self.server is not None
        try:
            sock, _ = self.server.accept()
        except OSError:
            return
        sock.setblocking(False)
        with self.lock:
            self.pending.add(sock)
        self.selector.register(sock, selectors.EVENT_READ, ("pending", _Line(sock)))

    def _read(self, data: object, sock: object) -> None:
        if isinstance(data, tuple):  # a connection that has not said hello yet
            _, line = data
            for text in line.read():
                self._hello(line, text)
                break
            if line.closed:
                self._drop(sock)
            return
        line = self.line if not self.coordinator else next((w for w in self.workers.values() if w.sock is sock), None)
        if line is None:
            self._drop(sock)
            return
        for text in line.read():
            self._message(line, text)
        if line.closed:
            with self.lock:
                self.selector.unregister(sock)

    def _drop(self, sock: object) -> None:
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        try:
            sock.close()  # type: ignore[attr-defined]
        except OSError:
            pass

    def _hello(self, line: _Line, text: str) -> None:
        words = text.split()
        ok = len(words) == 4 and words[0] == "hello" and words[2].isdigit() and words[3].isdigit()
        if not ok or words[1] != self.key or int(words[3]) != self.nodes:
            line.send("reject not the same job (check that every node runs the same zerokit launch command)")
            self._drop(line.sock)
            return
        rank = int(words[2])
        with self.lock:
            self.pending.discard(line.sock)
            if not 0 < rank < self.nodes or rank in self.workers:
                line.send(f"reject node rank {rank} is out of range or taken")
                self._drop(line.sock)
                return
            self.workers[rank] = line
            self.selector.modify(line.sock, selectors.EVENT_READ, "line")
            if self.failure is not None:  # it joins a job that is already over
                line.send(f"stop {self.failure}")

    def _message(self, line: _Line, text: str) -> None:
        word, _, arg = text.partition(" ")
        code = int(arg) if arg.lstrip("-").isdigit() else None
        with self.lock:
            if self.coordinator:
                if word == "exit" and code is not None:
                    rank = next(r for r, w in self.workers.items() if w is line)
                    self.exits[rank] = code
            elif word == "stop" and code is not None:
                self.stop_code = code
            elif word == "verdict" and code is not None:
                self.verdict = code
            elif word == "reject":
                self.stop_code = LOST
                _say(f"node watch: node 0 refused this node: {arg}")

    # ------------------------------------------------------------ while the ranks run

    def poll(self) -> int | None:
        """None while all is well; an exit code when this node must stop its ranks now."""
        with self.lock:
            return self._coordinator_poll() if self.coordinator else self._worker_poll()

    def _coordinator_poll(self) -> int | None:
        if self.failure is not None:
            return self.failure
        now = time.monotonic()
        for rank in sorted(self.workers):
            line = self.workers[rank]
            code = self.exits.get(rank)
            if code is not None and code != 0:
                return self._fail(code, f"node {rank} exited with {code}")
            if code is None and (line.closed or now - line.last_seen > self.dead_after):
                return self._fail(LOST, f"node {rank}'s zerokit went away before its ranks finished")
        missing = [r for r in range(1, self.nodes) if r not in self.workers]
        if missing and now - self.started > self.join_timeout:
            return self._fail(LOST, f"node {', '.join(map(str, missing))} did not join within "
                              f"{self.join_timeout:.0f} s")
        return None

    def _fail(self, code: int, why: str) -> int:
        self.failure = code
        if not self.failure_said:
            self.failure_said = True
            _say(f"node watch: {why}; stopping the ranks on every node")
        for line in self.workers.values():
            line.send(f"stop {code}")
        return code

    def _worker_poll(self) -> int | None:
        if self.stop_code is not None:
            return self.stop_code or LOST
        assert self.line is not None
        if self.line.closed or time.monotonic() - self.line.last_seen > self.dead_after:
            _say("node watch: lost node 0's zerokit; stopping this node's ranks")
            self.stop_code = LOST
            return LOST
        return None

    # ------------------------------------------------------------ the end

    def finish(self, code: int) -> int:
        """Report how this node's ranks ended; wait for the job's verdict (bounded: every node is either heard from
        every second or declared dead). Returns the exit code for this node's zerokit."""
        try:
            return self._finish_coordinator(code) if self.coordinator else self._finish_worker(code)
        finally:
            self.close()

    def _finish_coordinator(self, code: int) -> int:
        with self.lock:
            if code != 0 and self.failure is None:
                self._fail(code, f"node 0 exited with {code}")
        while True:
            with self.lock:
                failed = self._coordinator_poll()
                now = time.monotonic()
                unsettled = [r for r in range(1, self.nodes) if r not in self.exits and (
                    (r in self.workers and not self.workers[r].closed
                     and now - self.workers[r].last_seen <= self.dead_after)
                    or (r not in self.workers and failed is None))]
                if not unsettled:
                    verdict = code or failed or next((c for _, c in sorted(self.exits.items()) if c), 0)
                    for line in self.workers.values():
                        line.send(f"verdict {verdict}")
                    return verdict
            time.sleep(0.1)

    def _finish_worker(self, code: int) -> int:
        assert self.line is not None
        with self.lock:
            self.line.send(f"exit {code}")
        while True:
            with self.lock:
                if self.verdict is not None:
                    return code or self.verdict
                if self.line.closed or time.monotonic() - self.line.last_seen > self.dead_after:
                    if code == 0:
                        _say("node watch: lost node 0's zerokit before the job's verdict; exiting non-zero")
                    return code or self.stop_code or LOST
            time.sleep(0.1)

    def close(self) -> None:
        self.stopped.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=2)
        with self.lock:
            for line in self._lines():
                line.close()
            for sock in self.pending:  # connected, hello not yet read: they learn the job is over by the close
                sock.close()
            if self.server is not None:
                self.server.close()
        try:
            self.selector.close()
        except OSError:
            pass


def default_port(master_port: int) -> int:
    return master_port + 1 if master_port < 65535 else master_port - 1


def validate_port(port: int) -> int:
    if not 1 <= port <= 65535:
        raise BadInput(f"--watch-port must be 1-65535 (or 0 for no node watch), got {port}")
    return port
