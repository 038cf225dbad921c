"""Worker processes for end-to-end tests: started with the real CLI, always stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Procs:
    """Starts ``deepagents`` subprocesses and kills whatever is left at teardown.

    A process writes its output to a log file (``output()`` reads it), not to a pipe: a
    pipe nobody reads fills up after 64 KiB, and a worker logging an outage would then
    block on its next log line. ``pipe=True`` gives a process pipes, for a caller that
    reads them."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs = tempfile.TemporaryDirectory(prefix="deepagents-procs-")
        self._paths: dict[int, Path] = {}

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.cli_module("deepagents", *args, env=env)

    def cli_module(
        self, module: str, *args: str, env: dict[str, str] | None = None, pipe: bool = False
    ) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", module, *args]
        environ = {**os.environ, **self.env, **(env or {})}
        if pipe:
            proc = subprocess.Popen(
                command, cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        else:
            path = Path(self._logs.name) / f"{len(self.procs)}-{module}.log"
            with path.open("wb") as log:
                proc = subprocess.Popen(
                    command, cwd=REPO, env=environ, stdout=log, stderr=subprocess.STDOUT
                )
            self._paths[proc.pid] = path
        self.procs.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        """The last lines a process without pipes wrote (for assertion messages)."""
        return self.log(proc)[-4000:]

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        """All that a process without pipes wrote."""
        return self._paths[proc.pid].read_text(errors="replace")

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
        self._logs.cleanup()
