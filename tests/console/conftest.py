"""The console's browser tests: Debian's Chromium (``/usr/bin/chromium``, installed by
``.ci/run``), driven by Playwright for Python, never a browser Playwright downloads. Without
it the tests are skipped, except in CI (``CI=true``), where they fail.

One deployment per module: a real gateway process and a real worker of the asking agent,
the audit outbox on, tenants alpha and beta."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deepagents._internal.redis_server import free_port
from deepagents.gateway.auth import hash_key
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, Gateway, Proc, start_gateway, start_worker
from tests.support.asking import CONFIG

CHROMIUM = Path("/usr/bin/chromium")
HOOK_SECRET_ENV = "DEEPAGENTS_TEST_CONSOLE_HOOK"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The tests take the docs' screenshots, but replace docs/console/*.png only when asked
# (DEEPAGENTS_TEST_SCREENSHOTS=1 ./scripts/test tests/console): a plain run leaves the
# checkout as it found it, and its shots go to a directory removed at the end.
_DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
_KEEP = bool(os.environ.get("DEEPAGENTS_TEST_SCREENSHOTS"))
SHOTS = _DOCS_SHOTS if _KEEP else Path(tempfile.gettempdir()) / f"deepagents-shots-{os.getpid()}"


@pytest.fixture(scope="session", autouse=True)
def _screenshot_dir() -> Iterator[None]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield
    if not _KEEP:
        shutil.rmtree(SHOTS, ignore_errors=True)


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason} (CI=true: .ci/run installs Debian's chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _missing(f"no {CHROMIUM}: apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (the dev extra)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def _config() -> str:
    keys = "\n".join(
        f"    - {{tenant: {t}, sha256: {hash_key(k)}, name: {t}-test}}" for t, k in KEYS.items()
    )
    # The lab agent, whose failing tasks reach the dead-letter stream after two deliveries.
    lab = '  lab: {class: "tests.agents:LabAgent", settings: {max_deliveries: 2}}\n'
    # A rollout on an agent no test submits to, for the Queues page to show.
    rollout = 'rollouts:\n  escalations: {stable: "1.0.0", canary: "1.1.0", weight: 0.2}\n'
    # Tenant alpha's webhook, at a port nothing listens on: a dead endpoint.
    hook = (
        f"webhooks:\n  alpha-hook: {{url: 'http://127.0.0.1:{free_port()}/hook', "
        f"secret_env: {HOOK_SECRET_ENV}, tenants: [alpha]}}\n"
    )
    return (
        CONFIG.replace("agents:\n", "agents:\n" + lab, 1)
        + rollout
        + hook
        + f"gateway:\n  api_keys:\n{keys}\n"
    )


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    for d in make_deployment(redis_url, _config()):
        d.env["DEEPAGENTS_OUTBOX"] = "true"
        yield d


@pytest.fixture(scope="module")
def worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, "tests.support.asking:ApprovalAgent") as proc:
        yield proc


@pytest.fixture(scope="module")
def lab_worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, "tests.agents:LabAgent") as proc:
        yield proc


@pytest.fixture(scope="module")
def gateway(deployment: Deployment, worker: Proc) -> Iterator[Gateway]:
    with start_gateway(deployment.env, ready_s=120) as gw:
        yield gw


@pytest.fixture(scope="module")
def api(gateway: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        yield client
