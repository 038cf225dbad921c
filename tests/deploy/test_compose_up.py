"""The proving test of docker-compose.yml: its own commands, environment and health checks.

No Docker engine runs here, so the test does what ``docker compose up`` would, with local
processes: it reads the file as Compose resolves it, starts each of our services' commands
in ``depends_on`` order (waiting for ``service_healthy`` and
``service_completed_successfully``), with the file's environment, its bind mounts mapped
to the repository's files, its secrets written to a directory of their own, and every
service name mapped to 127.0.0.1 on the file's ports. The test's Redis and PostgreSQL stand
in for the ``redis`` and ``postgres`` images; their health checks run against them. Then
every health check in the file must pass, and ``/health?full=true`` through the gateway.

Prometheus runs too (Debian's binary, with the file's mounts): every scrape target must be
up and the alert rules loaded. Grafana does not (no binary here; its provisioning is plain
files). The test adds only what keeps runs apart: a key prefix and an audit schema of its
own, dropped at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
import redis

from tests.deploy.support import REPO, compose_model
from tests.support.wait import eventually_sync

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

BIN = Path(sys.executable).parent
DATA_SERVICES = ("redis", "postgres")  # the test's servers stand in for these images
NOT_RUN = ("grafana",)  # no Grafana binary here: its provisioning is checked as files
# What the images hold that the compose file does not say: the Dockerfile's COPY, and the
# entrypoint of prom/prometheus (its service gives only the arguments).
IMAGE_FILES = {"/app/config/deepagents.yaml": REPO / "config" / "deepagents.yaml"}
ENTRYPOINTS = {"prometheus": ["prometheus"]}


class LocalStack:
    """The compose file's services as local processes."""

    def __init__(self, model: dict[str, Any], redis_url: str, pg_url: str, root: Path) -> None:
        self.services: dict[str, Any] = model["services"]
        self.redis_url, self.pg_url, self.root = redis_url, pg_url, root
        self.prefix = f"t{uuid.uuid4().hex[:10]}"
        self.schema = f"audit_t{uuid.uuid4().hex[:12]}"
        self.secrets = root / "secrets"  # the containers' /run/secrets
        self.secrets.mkdir()
        values = {"database_url": pg_url, "audit_hash_key": secrets.token_hex(16)}
        for name in model.get("secrets", {}):
            (self.secrets / name).write_text(values.get(name, "unused-here"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.order: list[str] = []

    # the file's values, mapped to this host ----------------------------------------------

    def _host(self, value: str) -> str:
        """A URL naming a service: the test's server for a data service, else 127.0.0.1."""

        def swap(match: re.Match[str]) -> str:
            scheme, host = match.group(1), match.group(2)
            if host == "redis":
                return self.redis_url.rstrip("/").rsplit("/", 1)[0] + "/"
            if host == "postgres":
                return self.pg_url.rstrip("/").rsplit("/", 1)[0] + "/"
            return f"{scheme}://127.0.0.1{match.group(3)}/"

        names = "|".join(map(re.escape, self.services))
        if value == "0.0.0.0":  # every address of a container: this host's loopback
            return "127.0.0.1"
        return re.sub(rf"^(\w+)://({names})(:\d+)?/", swap, value)

    def filesystem(self, name: str) -> Path:
        """The service's container paths under a directory of its own: its bind mounts
        (service names in them mapped to 127.0.0.1), its volumes, the image's files."""
        fs = self.root / f"fs-{name}"
        if fs.exists():
            return fs
        for target, source in IMAGE_FILES.items():
            (fs / target.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, fs / target.lstrip("/"))
        names = "|".join(map(re.escape, self.services))
        for mount in self.services[name].get("volumes", []):
            local = fs / mount["target"].lstrip("/")
            if mount["type"] != "bind":
                local.mkdir(parents=True, exist_ok=True)
                continue
            source = Path(mount["source"])
            files = [source] if source.is_file() else [p for p in source.rglob("*") if p.is_file()]
            for file in files:
                copy = local / file.relative_to(source) if source.is_dir() else local
                copy.parent.mkdir(parents=True, exist_ok=True)
                text = re.sub(rf"\b(?:{names}):(\d+)\b", r"127.0.0.1:\1", file.read_text())
                copy.write_text(text)
        return fs

    def _path(self, name: str, value: str) -> str:
        """``/container/path`` or ``--flag=/container/path`` under the service's directory."""
        flag, eq, path = value.rpartition("=") if value.startswith("--") else ("", "", value)
        if not path.startswith("/") or "://" in path:
            return value
        local = self.filesystem(name) / path.lstrip("/")
        return f"{flag}{eq}{local}" if local.exists() else value

    def environ(self, name: str) -> dict[str, str]:
        service = self.services[name]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPAGENTS_")}
        for key, value in (service.get("environment") or {}).items():
            env[key] = self._path(name, self._host(str(value)))
        secret_files = {s["target"]: s["source"] for s in service.get("secrets", [])}
        if secret_files:
            mounted = self.root / f"secrets-{name}"
            mounted.mkdir(exist_ok=True)
            for target, source in secret_files.items():
                (mounted / target).write_text((self.secrets / source).read_text())
            env["DEEPAGENTS_SECRETS_DIR"] = str(mounted)
        env |= {"DEEPAGENTS_PREFIX": self.prefix, "DEEPAGENTS_AUDIT_SCHEMA": self.schema}
        return env

    def argv(self, name: str, command: list[str]) -> list[str]:
        local = {"deepagents": str(BIN / "deepagents"), "python": sys.executable}
        return [
            self._path(name, local.get(a, "127.0.0.1" if a == "0.0.0.0" else a)) for a in command
        ]

    # compose up ---------------------------------------------------------------------------

    def up(self, name: str) -> None:
        """Start ``name`` once its dependencies hold their conditions, as compose does."""
        if name in self.procs or name in DATA_SERVICES:
            return
        service = self.services[name]
        for dep, rule in (service.get("depends_on") or {}).items():
            assert dep not in NOT_RUN, f"{name} depends on {dep}, which this test does not run"
            self.up(dep)
            if rule["condition"] == "service_healthy":
                self.wait_healthy(dep)
            elif rule["condition"] == "service_completed_successfully":
                code = self.procs[dep].wait(120)
                assert code == 0, f"{dep} exited {code}:\n{self.log(dep)}"
        for port in self._listens(service):
            with socket.socket() as probe:
                busy = probe.connect_ex(("127.0.0.1", port)) == 0
            assert not busy, f"port {port} of {name} is taken on this host"
        log = (self.root / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            self.argv(name, [*ENTRYPOINTS.get(name, []), *service["command"]]),
            env=self.environ(name), cwd=self.root,
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        self.order.append(name)

    @staticmethod
    def _listens(service: dict[str, Any]) -> list[int]:
        command = service.get("command") or []
        ports = [int(command[i + 1]) for i, a in enumerate(command) if a.endswith("-port")]
        ports += [int(command[i + 1]) for i, a in enumerate(command) if a == "--port"]
        return sorted(set(ports))

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def health_command(self, name: str) -> tuple[list[str], dict[str, str]]:
        test = self.services[name]["healthcheck"]["test"]
        kind, rest = test[0], test[1:]
        argv = ["sh", "-c", rest[0]] if kind == "CMD-SHELL" else self.argv(name, rest)
        env = dict(os.environ)
        if name == "redis":
            argv += ["-u", self.redis_url]
        elif name == "postgres":
            pg = urlsplit(self.pg_url)
            env |= {"PGHOST": pg.hostname or "127.0.0.1", "PGPORT": str(pg.port or 5432)}
        elif name in self.procs:
            # In its container a service is PID 1.
            argv = [a.replace("os.kill(1,", f"os.kill({self.procs[name].pid},") for a in argv]
        return argv, env

    def healthy(self, name: str) -> bool:
        if name in self.procs and self.procs[name].poll() is not None:
            raise AssertionError(f"{name} exited {self.procs[name].returncode}:\n{self.log(name)}")
        argv, env = self.health_command(name)
        timeout = _seconds(self.services[name]["healthcheck"].get("timeout", "30s"))
        try:
            done = subprocess.run(argv, env=env, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    def wait_healthy(self, name: str) -> None:
        eventually_sync(
            lambda: self.healthy(name), timeout=90, interval=0.5, what=f"{name} healthy"
        )

    def down(self) -> None:
        for name in reversed(self.order):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name in reversed(self.order):
            proc = self.procs[name]
            grace = _seconds(self.services[name].get("stop_grace_period", "10s"))
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        client = redis.Redis.from_url(self.redis_url)
        keys = list(client.scan_iter(match=f"{self.prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
        asyncio.run(_drop_schema(self.pg_url, self.schema))


async def _drop_schema(url: str, schema: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def _seconds(duration: str | int | float) -> float:
    """A compose duration: ``30s`` in the file, nanoseconds once Compose resolved it."""
    if isinstance(duration, int | float):
        return duration / 1e9
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, duration
    return float(match.group(1))


@pytest.fixture
def stack(redis_url: str, pg_url: str, tmp_path: Path) -> Iterator[LocalStack]:
    local = LocalStack(compose_model(), redis_url, pg_url, tmp_path)
    try:
        yield local
    finally:
        local.down()


def _prometheus_runs() -> bool:
    """Debian's prometheus package (.ci/run installs it) brings the server beside promtool."""
    if shutil.which("prometheus"):
        return True
    if os.environ.get("CI") or os.environ.get("DEEPAGENTS_TEST_REQUIRE_PROMTOOL"):
        pytest.fail("prometheus is missing: .ci/run installs Debian's prometheus package")
    return False


def test_the_compose_stack_comes_up_healthy_and_a_probe_task_gets_through(
    stack: LocalStack,
) -> None:
    ours = [n for n, s in stack.services.items() if "build" in s]
    assert set(stack.services) == {*ours, *DATA_SERVICES, "prometheus", *NOT_RUN}
    run = [*ours, "prometheus"] if _prometheus_runs() else ours
    for name in run:
        stack.up(name)
    for name in [*DATA_SERVICES, *run]:
        if "healthcheck" in stack.services[name]:
            stack.wait_healthy(name)
    assert stack.procs["db-migrate"].returncode == 0  # a one-shot: done, not running
    gateway_port = stack.services["gateway"]["ports"][0]["published"]
    with contextlib.closing(httpx.Client(timeout=30)) as http:
        answer = http.get(f"http://127.0.0.1:{gateway_port}/health", params={"full": "true"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "ok", answer.text
        if "prometheus" in stack.procs:
            _prometheus_scrapes_everything(http, stack.services["prometheus"])


def _prometheus_scrapes_everything(http: httpx.Client, service: dict[str, Any]) -> None:
    """Every scrape target of prometheus.yml answers, and the alert rules are loaded."""
    api = f"http://127.0.0.1:{service['ports'][0]['published']}/api/v1"

    def all_up() -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = http.get(f"{api}/targets").json()["data"]["activeTargets"]
        return targets if all(t["health"] == "up" for t in targets) else []

    targets = eventually_sync(all_up, timeout=60, interval=1, what="every scrape target up")
    jobs = {t["labels"]["job"] for t in targets}
    assert {"deepagents-exporter", "deepagents-gateway", "deepagents-workers"} <= jobs
    groups = http.get(f"{api}/rules").json()["data"]["groups"]
    assert any(g["name"] == "deepagents" and g["rules"] for g in groups), groups
