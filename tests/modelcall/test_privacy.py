"""The prompt and the API key never reach logs, records, audit events or metrics."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import generate_latest

from deepagents.modelcall import ModelUnavailable, usage_scope, wrap_model_call
from deepagents.modelcall.simulator import Action, SimulatorThread
from deepagents.transport.outbox import encode_events
from tests.modelcall.conftest import MakeCalls, model_config

PROMPT_CANARY = "CANARY-PROMPT-7f3a9e"
KEY_CANARY = "sk-CANARY-KEY-91b2c4"


async def test_prompt_and_key_never_logged(
    sim: SimulatorThread,
    make_calls: MakeCalls,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx/httpcore/hvac log most at DEBUG
    monkeypatch.setenv("SIM_KEY", KEY_CANARY)
    sim.call(lambda: sim.sim.configure(require_key=True))
    sim.call(lambda: sim.sim.issue_key(KEY_CANARY))
    calls = make_calls(
        {
            "m": model_config(
                sim.url, api_key_env="SIM_KEY", price_in_per_1k=1.0, breaker={"min_calls": 100}
            )
        }
    )
    prompt = [{"role": "user", "content": f"Summarise {PROMPT_CANARY} for me"}]
    sim.call(
        lambda: sim.sim.push(
            Action(503), Action(429, retry_after_s=0.1), Action(stall_after=2, stall_s=5)
        )
    )
    with usage_scope() as ledger:
        reply = await wrap_model_call("m", prompt, calls=calls, agent="research")
        sim.call(lambda: sim.sim.configure(error_rate=1.0))
        with pytest.raises(ModelUnavailable) as caught:
            await wrap_model_call("m", prompt, calls=calls, agent="research")
    assert len(reply.attempts) == 4 and len(ledger.attempts) == 8
    surfaces = {
        "logs": caplog.text + "".join(repr(r.__dict__) for r in caplog.records),
        "records": repr(reply) + repr(caught.value.attempts),
        "error": str(caught.value) + repr(caught.value),
        "audit": encode_events(ledger.audit_events("task-1")).decode(),
        "metrics": generate_latest(calls.metrics.registry).decode(),
    }
    for name, text in surfaces.items():
        assert text, name
        assert PROMPT_CANARY not in text, name
        assert KEY_CANARY not in text, name
    assert reply.prompt_sha256.startswith("sha256:") and reply.prompt_sha256 in surfaces["audit"]
    assert "model_call" in surfaces["logs"]  # the calls were logged, by hash


async def test_hmac_prompt_hash_when_a_key_is_set(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    plain = make_calls({"m": model_config(sim.url)})
    keyed = make_calls({"m": model_config(sim.url)}, prompt_hash_key=b"k1")
    a = await wrap_model_call("m", prompt="same", calls=plain)
    b = await wrap_model_call("m", prompt="same", calls=keyed)
    assert a.prompt_sha256.startswith("sha256:")
    assert (
        b.prompt_sha256.startswith("hmac-sha256:") and b.prompt_sha256[12:] != a.prompt_sha256[7:]
    )
