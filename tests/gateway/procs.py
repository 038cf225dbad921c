"""Real processes for the gateway tests: gateways (uvicorn) and workers, on free loopback ports.

Every process is started by a fixture and stopped by it (SIGTERM, then SIGKILL by pid).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import httpx

from deepagents._internal.redis_server import free_port
from deepagents.gateway.auth import hash_key
from tests.support.wait import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"alpha": "dak_test_alpha_key_0123456789", "beta": "dak_test_beta_key_9876543210"}


def config_yaml(
    *, tenants: str = "", probe_timeout_s: float = 3.0, max_body: int = 1_048_576
) -> str:
    keys = "\n".join(
        f"    - {{tenant: {t}, sha256: {hash_key(k)}, name: {t}-test}}" for t, k in KEYS.items()
    )
    return f"""
tiers:
  p0: {{concurrency: 20, max_wait_ms: 1000}}
  p1: {{concurrency: 50, max_wait_ms: 10000}}
  p2: {{concurrency: 100, max_wait_ms: 120000}}
default_tier: p2
defaults: {{shards: 2, visibility_timeout_ms: 3000, block_ms: 200, grace_period_s: 1}}
agents:
  echo: {{class: "agents.echo:EchoAgent"}}
  risk: {{class: "agents.risk:RiskAgent"}}
strategies:
  - {{name: urgent, match: {{intent: echo, payload.urgent: true}}, tier: p0}}
gateway:
  api_keys:
{keys}
  probe_timeout_s: {probe_timeout_s}
  header_timeout_s: 2.0
  body: {{max_body_bytes: {max_body}, read_timeout_s: 1.5}}
{tenants}
"""


def write_config(text: str) -> Path:
    path = _temp_file(".yaml")
    path.write_text(text)
    return path


def _temp_file(suffix: str) -> Path:
    fd, name = tempfile.mkstemp(prefix="deepagents-gw-", suffix=suffix)
    os.close(fd)
    return Path(name)


def env_for(redis_url: str, prefix: str, config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPAGENTS_")}
    env.update(
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_PREFIX=prefix,
        DEEPAGENTS_CONFIG=str(config),
        PYTHONUNBUFFERED="1",
    )
    return env


@dataclass
class Proc:
    args: list[str]
    env: dict[str, str]
    log: Path = field(default_factory=lambda: _temp_file(".log"))
    process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Proc:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.args, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )
        return self

    def stop(self, timeout: float = 10.0) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
        finally:
            self.log.unlink(missing_ok=True)  # a failing test has shown its output already

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@dataclass
class Gateway(Proc):
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30.0) -> Gateway:
        def up() -> bool:
            assert self.process is not None and self.process.poll() is None, self.output()
            try:
                return httpx.get(self.url + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        eventually_sync(up, timeout=timeout, what=f"gateway on {self.url}")
        return self


def start_gateway(env: dict[str, str], *extra: str, ready_s: float = 30.0) -> Gateway:
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "deepagents",
        "gateway",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]
    gw = Gateway(args=args, env=env, port=port)
    gw.start()
    try:
        return gw.wait_ready(ready_s)
    except BaseException:
        gw.stop()  # never leave a half-started gateway behind
        raise


def start_worker(env: dict[str, str], agent: str) -> Proc:
    return Proc(args=[sys.executable, "-m", "deepagents", "worker", agent], env=env).start()


def auth(tenant: str = "alpha") -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}
