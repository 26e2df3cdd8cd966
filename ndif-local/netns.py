"""A private network namespace for the NDIF services, with only the ports a client needs forwarded.

Ray's daemons (GCS, raylet, workers, dashboard agent) listen on every interface whatever
``--node-ip-address`` says. Started inside a namespace of their own, whose only interface is its
loopback, nothing they open is reachable from outside it. The API and the S3 store (whose
presigned URLs the client downloads results from) are then forwarded from 127.0.0.1 of the host
by :class:`PrivateNet.forward`, a small relay in the launching process. Needs root (``unshare``,
``nsenter``, ``setns``); :func:`available` says whether it can be used.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import selectors
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

CLONE_NEWNET = 0x40000000


def available() -> bool:
    return os.geteuid() == 0 and all(shutil.which(c) for c in ("unshare", "nsenter", "ip"))


def _loopback_up() -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", 9)) in (0, errno.ECONNREFUSED)


def _enter(path: str) -> None:
    """Move the calling thread (only it) into the namespace at ``path``."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


class PrivateNet:
    """A network namespace held open by one sleeping process; services join it with ``nsenter``."""

    def __init__(self, env: dict[str, str]):
        self.holder = subprocess.Popen(
            ["unshare", "--net", "--", "sh", "-c", "ip link set lo up && exec sleep infinity"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        self.path = f"/proc/{self.holder.pid}/ns/net"
        self._stop = threading.Event()
        self._listeners: list[socket.socket] = []
        own = os.readlink("/proc/self/ns/net")
        for _ in range(200):  # until the holder is in its own namespace and its loopback is up
            if self.holder.poll() is not None:
                raise RuntimeError("Could not create a network namespace (unshare --net failed).")
            with contextlib.suppress(OSError):
                if os.readlink(self.path) != own and self.call(_loopback_up):
                    return
            time.sleep(0.05)
        self.close()
        raise RuntimeError("The private network namespace did not come up.")

    def prefix(self) -> list[str]:
        """Put this before a command to run it inside the namespace."""
        return ["nsenter", f"--net={self.path}", "--"]

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run in a thread inside the namespace; its exception is raised here."""
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                _enter(self.path)
                out["value"] = fn()
            except BaseException as err:  # handed to the caller
                out["error"] = err

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join()
        if "error" in out:
            raise out["error"]
        return out.get("value")

    def port_open(self, port: int) -> bool:
        def probe() -> bool:
            with socket.socket() as s:
                s.settimeout(0.5)
                return s.connect_ex(("127.0.0.1", port)) == 0

        return bool(self.call(probe))

    def forward(self, port: int) -> None:
        """Relay 127.0.0.1:``port`` of the host to 127.0.0.1:``port`` inside the namespace."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        listener.settimeout(0.5)
        self._listeners.append(listener)
        threading.Thread(target=self._accept, args=(listener, port), daemon=True, name=f"ndif-fwd-{port}").start()

    def _accept(self, listener: socket.socket, port: int) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client, port), daemon=True).start()

    def _relay(self, client: socket.socket, port: int) -> None:
        try:
            _enter(self.path)
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        client.settimeout(None)
        peers = {client: upstream, upstream: client}
        sel = selectors.DefaultSelector()
        for s in peers:
            sel.register(s, selectors.EVENT_READ)
        open_ends = 2
        try:
            while open_ends and not self._stop.is_set():
                for key, _ in sel.select(timeout=0.5):
                    src = key.fileobj
                    data = src.recv(1 << 16)
                    if data:
                        peers[src].sendall(data)
                    else:
                        sel.unregister(src)
                        with contextlib.suppress(OSError):
                            peers[src].shutdown(socket.SHUT_WR)
                        open_ends -= 1
        except OSError:
            pass
        finally:
            sel.close()
            client.close()
            upstream.close()

    def close(self) -> None:
        self._stop.set()
        for listener in self._listeners:
            listener.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.holder.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.holder.wait(5)
