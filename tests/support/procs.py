"""Worker processes for end-to-end tests: started with the real CLI, always stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Procs:
    """Starts ``deepagents`` subprocesses and kills whatever is left at teardown."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.cli_module("deepagents", *args, env=env)

    def cli_module(
        self, module: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            env={**os.environ, **self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.procs.append(proc)
        return proc

    def worker(
        self, agent: str, *extra: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        return self.cli("worker", agent, *extra, env=env)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "deepagents", *args],
            cwd=REPO,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()
