"""Bounded reads: an answer over its cap (a 200 body, an error body, one SSE line) ends the
attempt as ``response_too_large``, is not retried, and never grows the process by much
more than the cap. Measured in a fresh process (``proc_big``) against the tests' own server
sending 50 MB; peak RSS is compared with the same process's baseline after a warm call."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.modelcall import ResponseTooLarge, wrap_model_call
from tests.modelcall.conftest import FAST, PROVIDERS, MakeCalls, model_config
from tests.modelcall.fleet import ROOT
from tests.modelcall.hostile_server import BIG, HostileServer

CAP = 2 * 1024 * 1024  # max_response_bytes of the oversized model


@pytest.fixture
def server() -> Iterator[HostileServer]:
    with HostileServer() as running:
        yield running


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.modelcall.proc_big", orjson.dumps(spec).decode()],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result: dict[str, Any] = orjson.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("mode", "stream"), [("big200", False), ("big500", False), ("bigsse", True)]
)
async def test_an_oversized_answer_is_response_too_large(
    server: HostileServer,
    redis_url: str,
    prefix: str,
    client: Redis,  # deletes the prefix's keys (the breaker's window) afterwards
    mode: str,
    stream: bool,
    provider: str,
) -> None:
    spec = {
        "redis_url": redis_url,
        "prefix": prefix,
        "stream": stream,
        "models": {
            "warm": {
                "base_url": server.url("perchar1"),
                **FAST,
                "stream": False,
                "provider": provider,
            },
            "big": {
                "base_url": server.url(mode),
                **FAST,
                "max_response_bytes": CAP,
                "provider": provider,
            },
        },
    }
    outcome = await asyncio.to_thread(_run, spec)
    assert (outcome["code"], outcome["reason"]) == ("response_too_large", "response_too_large")
    assert outcome["outcomes"] == ["response_too_large"]  # one attempt: not retried
    assert len(server.log(mode)) == 1
    baseline, peak = outcome["baseline_kib"] * 1024, outcome["peak_kib"] * 1024
    # 50 MB came at it; the process grew by at most about the cap (allocator slack included).
    assert BIG > 20 * CAP
    assert peak / baseline <= 1 + 2 * CAP / baseline, (peak - baseline) / CAP


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_announced_oversized_length_is_refused_before_reading(
    server: HostileServer, make_calls: MakeCalls, provider: str
) -> None:
    # Headers announce 50 MB and no body follows: refused at the headers, not timed out.
    model = model_config(
        server.url("biglen"),
        stream=False,
        max_response_bytes=CAP,
        timeouts={"total_s": 10},
        provider=provider,
    )
    calls = make_calls({"m": model})
    with pytest.raises(ResponseTooLarge):
        await wrap_model_call("m", prompt="q", calls=calls)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_retrying_an_oversized_answer_when_configured(
    server: HostileServer, make_calls: MakeCalls, provider: str
) -> None:
    model = model_config(
        server.url("big200"),
        provider=provider,
        stream=False,
        max_response_bytes=CAP,
        retry={"max_retries": 1, "response_too_large": True},
    )
    calls = make_calls({"m": model})
    reply = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    assert (reply.degraded, reply.reason) == (True, "response_too_large")
    assert [a.outcome for a in reply.attempts] == ["response_too_large"] * 2
    assert len(server.log("big200")) == 2
