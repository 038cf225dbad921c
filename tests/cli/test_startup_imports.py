"""What start-up imports: module names, not seconds, so the check is deterministic.

Each case runs a fresh interpreter that writes the names in ``sys.modules`` to a file as it
exits (an ``atexit`` hook registered first, so it runs last) and fails when a module on the
case's forbidden list is there: a package whose names are loaded lazily, a ``--help`` that
answers before any command's dependencies, a worker that runs its first task without the
gateway, FastAPI, jsonschema, hvac, rich or the OTLP exporter. (``-X importtime`` would miss
modules loaded by ``importlib.import_module``.) Speed itself is measured in
loadtests/bench_startup.py.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.cli.main import COMMANDS, command_module
from tests.cli.support import CONFIG, REPO, clean_env
from tests.support.procs import Procs

# Registered before anything else is imported, so it runs after every other exit hook.
_PROBE = """import atexit, sys
def _dump(path=sys.argv.pop(1)):
    with open(path, "w") as out:
        out.write("\\n".join(sorted(k for k, v in sys.modules.items() if v is not None)))
atexit.register(_dump)
"""
# The ``deepagents`` command itself, as ``python -m deepagents`` runs it.
_CLI = (
    "import runpy; sys.argv[0] = 'deepagents'; runpy.run_module('deepagents', run_name='__main__')"
)


def probe_command(listing: Path, code: str, *argv: str) -> list[str]:
    """The command line of a Python that runs ``code`` (``argv`` as its arguments) and lists
    its modules in ``listing`` on exit."""
    return [sys.executable, "-c", _PROBE + code, str(listing), *argv]


def cli_command(listing: Path, *argv: str) -> list[str]:
    return probe_command(listing, _CLI, *argv)


def imported(command: list[str], listing: Path) -> set[str]:
    """Every module ``command`` (from ``probe_command``) had imported when it exited."""
    done = subprocess.run(
        command, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(listing.read_text().split())


# Never on the start-up path of anything but the command that needs them.
ANYWHERE = (
    "deepagents.gateway",
    "fastapi",
    "starlette",
    "uvicorn",
    "asyncpg",
    "grpc",
    "jsonschema",
    "hvac",
    "rich",
    "opentelemetry.exporter",
    "a2a",  # the a2a extra: the gateway with gateway.a2a.enabled, an A2A remote agent
)
# Neither the scheduler nor its dependencies.
SCHEDULER = ("deepagents.orchestrator", "deepagents.worker", "deepagents.compose", "redis")
# The model-call layer's client and the agent toolkit's tool loop.
MODEL_CLIENT = ("httpx", "deepagents.modelcall.calls", "deepagents.agentkit.loop")
# The in-process backend (tests, deepagents.testing): never in a process on Redis.
MEMORY_BACKEND = ("deepagents.transport.memory", "deepagents.store.memory_tasks")
# What a bare import or the top-level help has no use for at all.
HEAVY = ("pydantic", "httpx", "aiohttp", "yaml", "opentelemetry", "prometheus_client")


def offenders(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    """The modules that are, or are inside, a forbidden package."""
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))


@pytest.mark.parametrize(
    ("code", "forbidden"),
    [
        ("import deepagents", ANYWHERE + SCHEDULER + HEAVY),
        ("import deepagents; deepagents.__version__", ANYWHERE + SCHEDULER + HEAVY),
        ("from deepagents import Task, Result, AgentContract", ANYWHERE + SCHEDULER),
        ("from deepagents import InvalidInput, current_context", ANYWHERE + SCHEDULER),
        # httpx (which it needs) may bring rich: that is httpx's affair, not a scheduler's.
        ("import deepagents.http_client", (*SCHEDULER, "fastapi", "jsonschema", "hvac")),
        # The model-call client (httpx) and the tool loop: loaded when the config declares a
        # model or an agent calls them, not by every worker.
        ("import deepagents.cli.worker", (*ANYWHERE, *MODEL_CLIENT, *MEMORY_BACKEND)),
    ],
)
def test_the_package_loads_its_names_lazily(
    tmp_path: Path, code: str, forbidden: tuple[str, ...]
) -> None:
    listing = tmp_path / "modules"
    modules = imported(probe_command(listing, code), listing)
    assert "deepagents" in modules  # the listing was written
    assert offenders(modules, forbidden) == []


def test_the_lazy_names_are_the_exported_ones() -> None:
    import deepagents

    for name in deepagents.__all__:
        assert getattr(deepagents, name) is not None, name
    with pytest.raises(AttributeError):
        _ = deepagents.NotExported  # type: ignore[attr-defined]


def _commands(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith("deepagents.cli.")} - {
        "deepagents.cli.main",
        "deepagents.cli.common",  # shared plumbing
    }


@pytest.mark.parametrize("argv", [("--help",), ("--config", "x.yaml", "-h"), ("nosuch", "-h")])
def test_the_top_level_help_imports_no_command(tmp_path: Path, argv: tuple[str, ...]) -> None:
    listing = tmp_path / "modules"
    subprocess.run(
        cli_command(listing, *argv), cwd=REPO, env=clean_env(), capture_output=True,
        timeout=60, check=False,
    )  # fmt: skip
    modules = set(listing.read_text().split())
    assert "deepagents.cli.main" in modules
    assert _commands(modules) == set()
    assert offenders(modules, ANYWHERE + SCHEDULER + HEAVY + ("deepagents.config",)) == []


def test_a_command_help_imports_that_command_only(tmp_path: Path) -> None:
    listing = tmp_path / "modules"
    modules = imported(cli_command(listing, "publish", "--help"), listing)
    assert _commands(modules) == {"deepagents.cli.publish"}
    assert offenders(modules, ANYWHERE) == []


def test_the_top_level_help_lines_are_the_commands_own() -> None:
    """``COMMANDS`` repeats each command's help so ``--help`` needs no module: kept equal."""
    sub = argparse.ArgumentParser().add_subparsers()
    for name in COMMANDS:
        command_module(name).register(sub)
    own = {action.dest: action.help for action in sub._choices_actions}
    assert own == COMMANDS


async def test_a_worker_runs_its_first_task_without_forbidden_modules(
    redis_url: str, prefix: str, client: Redis, tmp_path: Path
) -> None:
    """The real worker, from exec through its first task to its exit, on the repository's
    config (which declares a model, so the model-call layer starts too). ``client`` deletes
    the prefix's keys afterwards."""
    env = clean_env(
        DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix, DEEPAGENTS_CONFIG=str(CONFIG)
    )
    listing = tmp_path / "modules"
    procs = Procs(env)
    try:
        with (tmp_path / "worker.log").open("wb") as out:
            worker = subprocess.Popen(
                cli_command(listing, "worker", "agents.echo:EchoAgent"),
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.procs.append(worker)
        done = procs.run("publish", "--intent", "echo", "--payload", '{"n": 1}', "--wait", "60")
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout)["status"] == "success"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, (tmp_path / "worker.log").read_text()
    finally:
        procs.close()
    modules = set(listing.read_text().split())
    assert {"deepagents.worker.worker", "deepagents.modelcall.calls", "httpx"} <= modules
    # aiohttp: remote agents only; the orchestrator: built when the agent first delegates
    # or escalates (EchoAgent never does; the start checks the config's classes with
    # ``routing`` alone); the metrics SDK: redis-py's own metrics (see the next test); the
    # trace SDK: only with an exporter configured (none here)
    late = (
        "aiohttp",
        "deepagents.orchestrator.orchestrator",
        "deepagents.orchestrator.submit",
        "opentelemetry.sdk",
        "psutil",  # the trace SDK's resource detection
    )
    assert offenders(modules, (*ANYWHERE, *MEMORY_BACKEND, *late)) == []


def test_the_metrics_sdk_is_hidden_from_redis_only_while_the_command_loads() -> None:
    """redis-py's import of the OpenTelemetry metrics SDK (for metrics it keeps off) is
    skipped while a command's modules load; after that, the SDK imports as usual."""
    code = (
        "import sys\n"
        "from deepagents.cli.main import main\n"
        "try:\n"
        "    main(['worker', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import redis.observability.providers as p\n"
        "assert 'redis' in sys.modules and not p.OTEL_AVAILABLE\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "print(MeterProvider.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=clean_env(), capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "MeterProvider"
