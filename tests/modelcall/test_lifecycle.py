"""One httpx client (connection pool) per event loop, closed on shutdown; never shared."""

from __future__ import annotations

import asyncio
import threading

import pytest

from deepagents.modelcall import wrap_model_call
from deepagents.modelcall.simulator import SimulatorThread
from tests.modelcall.conftest import MakeCalls, model_config


async def test_one_client_per_loop_closed_on_shutdown(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url), "n": model_config(sim.url)})
    async with calls:
        client = calls.client()
        await asyncio.gather(
            *(wrap_model_call(name, prompt="q", calls=calls) for name in ["m", "n"] * 10)
        )
        assert calls.client() is client and calls.clients_created == 1
        # Through a name: mypy would narrow the attribute itself to False for good.
        open_inside = not client.is_closed
        assert open_inside
    assert client.is_closed and calls.closed
    with pytest.raises(RuntimeError, match="closed"):
        await wrap_model_call("m", prompt="q", calls=calls)
    await calls.aclose()  # idempotent


async def test_refuses_another_event_loop(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls({"m": model_config(sim.url)})
    await wrap_model_call("m", prompt="q", calls=calls)
    errors: list[BaseException] = []

    def other_loop() -> None:
        try:
            asyncio.run(wrap_model_call("m", prompt="q", calls=calls))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=other_loop)
    thread.start()
    thread.join(timeout=10)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "another event loop" in str(errors[0])
    assert calls.clients_created == 1
