"""``embed`` against the simulator's ``/v1/embeddings``: concurrent calls in one worker
become one HTTP request (counted at the simulator), each caller gets its own vectors and
its share of tokens and cost, a lone call goes after ``max_wait_ms``, a failed batch fails
every caller with the same error, and the gates apply (a spent budget sends nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deepagents.config.models import ModelConfig, check_models
from deepagents.modelcall import (
    EmbeddingReply,
    InvalidRequest,
    ModelUnavailable,
    embed,
    usage_scope,
    wrap_model_call,
)
from deepagents.modelcall.embedding import split
from deepagents.modelcall.simulator import Api, SimulatorThread, embedding_vector
from tests.modelcall.conftest import MakeCalls, model_config

PRICE = 0.0001  # USD per 1,000 input tokens

# Four callers, 1 + 2 + 3 + 2 = 8 inputs of different lengths.
CALLERS = [
    ["alpha"],
    ["a longer second input", "bravo"],
    ["charlie", "delta delta delta delta", "echo"],
    ["foxtrot", "the eighth and last input of the batch"],
]


def _embedder(url: str, **overrides: Any) -> Any:
    return model_config(url, kind="embedding", price_in_per_1k=PRICE, **overrides)


def _embedding_requests(sim: SimulatorThread) -> list[Any]:
    return [entry for entry in sim.log() if entry.api is Api.EMBEDDINGS]


async def test_four_concurrent_calls_are_one_request(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    # A batch of 8 inputs goes as soon as it is full; the long wait could never send it.
    model = _embedder(sim.url, batching={"batch_size": 8, "max_wait_ms": 10_000})
    calls = make_calls({"embedder": model})

    async def one(inputs: list[str]) -> tuple[EmbeddingReply, int, float]:
        with usage_scope() as usage:  # each caller's task has its own ledger
            reply = await embed("embedder", inputs, calls=calls, agent="rag")
        return reply, usage.tokens_used, usage.cost_usd

    results = await asyncio.gather(*(one(inputs) for inputs in CALLERS))
    (request,) = _embedding_requests(sim)
    assert (request.inputs, request.status) == (8, 200)
    for inputs, (reply, ledger_tokens, ledger_cost) in zip(CALLERS, results, strict=True):
        # Its own vectors, in its order: the simulator's embedding of each of its inputs.
        assert reply.vectors == tuple(tuple(embedding_vector(text, 8)) for text in inputs)
        assert reply.batch_inputs == 8
        (attempt,) = reply.attempts
        assert attempt.outcome == "ok" and attempt.tokens_out == 0
        assert reply.cost_usd == round(reply.tokens_in * PRICE / 1000, 6)
        assert (ledger_tokens, ledger_cost) == (reply.tokens_in, reply.cost_usd)
    shares = [reply.tokens_in for reply, _, _ in results]
    assert sum(shares) == request.prompt_tokens  # the shares add up to what was billed
    # In proportion to each caller's characters: the longest caller pays the most.
    chars = [sum(map(len, inputs)) for inputs in CALLERS]
    assert shares.index(max(shares)) == chars.index(max(chars))


async def test_a_lone_call_goes_after_max_wait(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    model = _embedder(sim.url, batching={"batch_size": 64, "max_wait_ms": 20})
    calls = make_calls({"embedder": model})
    reply = await embed("embedder", ["only me"], calls=calls)
    assert reply.vectors == (tuple(embedding_vector("only me", 8)),)
    assert [e.inputs for e in _embedding_requests(sim)] == [1]


async def test_callers_past_the_batch_size_start_the_next_batch(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    model = _embedder(sim.url, batching={"batch_size": 3, "max_wait_ms": 50})
    calls = make_calls({"embedder": model})
    replies = await asyncio.gather(*(embed("embedder", inputs, calls=calls) for inputs in CALLERS))
    # 1 + 2 fill a batch; 3 fills one alone; 2 goes after the wait. No caller is split.
    assert sorted(e.inputs for e in _embedding_requests(sim)) == [2, 3, 3]
    for inputs, reply in zip(CALLERS, replies, strict=True):
        assert reply.vectors == tuple(tuple(embedding_vector(t, 8)) for t in inputs)


async def test_a_failed_batch_fails_every_caller_with_the_same_error(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    model = _embedder(sim.url, batching={"batch_size": 8, "max_wait_ms": 10_000})
    calls = make_calls({"embedder": model})
    sim.call(lambda: sim.sim.burst(400, 1, code="invalid_request_error"))
    outcomes = await asyncio.gather(
        *(embed("embedder", inputs, calls=calls) for inputs in CALLERS), return_exceptions=True
    )
    assert all(isinstance(o, InvalidRequest) for o in outcomes)
    assert len({str(o) for o in outcomes}) == 1
    assert len(_embedding_requests(sim)) == 1  # one request, never retried


async def test_a_transient_failure_is_retried_for_the_whole_batch(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    model = _embedder(sim.url, batching={"batch_size": 8, "max_wait_ms": 10_000})
    calls = make_calls({"embedder": model})
    sim.call(lambda: sim.sim.burst(503, 1))
    replies = await asyncio.gather(*(embed("embedder", inputs, calls=calls) for inputs in CALLERS))
    assert [e.status for e in _embedding_requests(sim)] == [503, 200]
    for reply in replies:
        assert [a.outcome for a in reply.attempts] == ["transient", "ok"]


async def test_a_spent_budget_sends_nothing(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    model = _embedder(sim.url, limits={"daily_budget_usd": 0})
    calls = make_calls({"embedder": model})
    with pytest.raises(ModelUnavailable) as caught:
        await embed("embedder", ["x"], calls=calls)
    assert caught.value.reason == "budget_exhausted"
    assert _embedding_requests(sim) == []


async def test_kinds_are_not_mixed(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls({"embedder": _embedder(sim.url), "chat": model_config(sim.url)})
    with pytest.raises(InvalidRequest, match="not an embedding model"):
        await embed("chat", ["x"], calls=calls)
    with pytest.raises(InvalidRequest, match="use embed"):
        await wrap_model_call("embedder", prompt="x", calls=calls)
    with pytest.raises(InvalidRequest, match="not one string"):
        await embed("embedder", "x", calls=calls)
    assert sim.log() == []


def test_shares_add_up() -> None:
    assert split(10, [1, 1, 1]) == [4, 3, 3]
    assert split(7, [5, 0, 5]) == [4, 0, 3]
    assert sum(split(1001, [3, 7, 11, 13])) == 1001


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"provider": "anthropic"}, "needs provider: openai"),
        ({"fallback": {"text": "x"}}, "no fallbacks and no fallback"),
        ({"batching": {"batch_size": 0}}, "batch_size"),
    ],
)
def test_embedding_models_are_checked_at_load(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelConfig.model_validate({"base_url": "http://x/v1", "kind": "embedding", **extra})


def test_a_chat_model_cannot_fall_back_to_an_embedding_model() -> None:
    models = {
        "chat": ModelConfig.model_validate({"base_url": "http://x/v1", "fallbacks": ["vec"]}),
        "vec": ModelConfig.model_validate({"base_url": "http://x/v1", "kind": "embedding"}),
    }
    with pytest.raises(ValueError, match="'vec' is of kind embedding, not chat"):
        check_models(models)
