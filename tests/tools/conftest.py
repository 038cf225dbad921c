"""Real MCP servers for the tools tests: the SDK server of ``mcp_server.py`` over stdio and
over streamable HTTP (a subprocess on a free port), and the hostile ``mcp_garbage.py``."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deepagents._internal.redis_server import free_port
from deepagents.config.schema import McpServerConfig
from tests.support.procs import REPO
from tests.support.wait import eventually_sync


def stdio_config(effects: Path, **extra: object) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {
            "command": sys.executable,
            "args": ["-m", "tests.tools.mcp_server", "stdio"],
            "cwd": str(REPO),
            "env_from_env": {"MCP_SIDE_EFFECTS": "MCP_SIDE_EFFECTS"},
            **extra,
        }
    )


def garbage_config(mode: str) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {
            "command": sys.executable,
            "args": ["-m", "tests.tools.mcp_garbage", mode],
            "cwd": str(REPO),
            "connect_timeout_s": 20,
        }
    )


class HttpServer:
    """The SDK server over streamable HTTP in a subprocess; ``restart`` keeps its port."""

    def __init__(self, effects: Path) -> None:
        self.port = free_port()
        self.effects = effects
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        env = {"MCP_SIDE_EFFECTS": str(self.effects), "PATH": "/usr/bin:/bin"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tools.mcp_server", "http", str(self.port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        eventually_sync(self._accepting, timeout=30, what="the MCP server's port")

    def _accepting(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def config(self, **extra: object) -> McpServerConfig:
        return McpServerConfig.model_validate({"url": self.url, **extra})


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "effects.log"
    monkeypatch.setenv("MCP_SIDE_EFFECTS", str(path))
    return path


@pytest.fixture
def http_server(effects: Path) -> Iterator[HttpServer]:
    server = HttpServer(effects)
    server.start()
    try:
        yield server
    finally:
        server.kill()
