"""Timeouts of plain (non-streaming) calls, as docs/modelcall.md states them: each attempt
is bounded by ``timeouts.attempt_s`` (default half of ``total_s``), so an attempt that hangs
before its headers leaves time for a retry; ``first_token_s`` bounds streams only, since a
plain answer's headers come when the whole generation is done."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from deepagents.modelcall import wrap_model_call
from tests.modelcall.conftest import PROVIDERS, MakeCalls, model_config
from tests.modelcall.hostile_server import HostileServer


@pytest.fixture
def server() -> Iterator[HostileServer]:
    with HostileServer() as running:
        yield running


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("timeouts", "hung"),
    [
        ({"total_s": 4}, 1),  # default: an attempt gets 2 s of the 4
        ({"total_s": 4, "attempt_s": 0.5}, 2),
    ],
)
async def test_a_hung_plain_attempt_leaves_time_for_a_retry(
    server: HostileServer,
    make_calls: MakeCalls,
    timeouts: dict[str, Any],
    hung: int,
    provider: str,
) -> None:
    model = model_config(
        server.url(f"hang{hung}"), stream=False, timeouts=timeouts, provider=provider
    )
    calls = make_calls({"m": model})
    reply = await wrap_model_call("m", prompt="q", calls=calls)
    assert not reply.degraded
    finished = "end_turn" if provider == "anthropic" else "stop"
    assert [(a.outcome, a.detail) for a in reply.attempts] == [
        *[("transient", "attempt_timeout")] * hung,
        ("ok", finished),
    ]
    assert len(server.log("hang")) == hung + 1


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_first_token_s_does_not_bound_a_plain_answer(
    server: HostileServer, make_calls: MakeCalls, provider: str
) -> None:
    # Headers and body after 1.5 s, with first_token_s 0.5: a plain answer is accepted.
    calls = make_calls(
        {
            "m": model_config(
                server.url("late1500"),
                stream=False,
                provider=provider,
                timeouts={"total_s": 10, "first_token_s": 0.5},
            )
        }
    )
    reply = await wrap_model_call("m", prompt="q", calls=calls)
    assert not reply.degraded
    assert [a.outcome for a in reply.attempts] == ["ok"]
