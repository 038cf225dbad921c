"""``embed``: embedding calls through the same gates as chat calls, batched per worker.

Concurrent calls for one model (and one tenant and agent: budgets are theirs) coalesce into
one HTTP request of up to ``batching.batch_size`` inputs, or what arrived within
``batching.max_wait_ms`` of the first. The request goes through ``ModelAttempts`` like any
chat call: budget hold, rate admission, breaker, retries, credentials, records, metrics.
Each caller gets its own vectors and its share of the tokens and cost (in proportion to
the characters of its inputs); a failed batch fails each caller with the same error.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Sequence
from datetime import datetime

from deepagents.config.models import ModelKind
from deepagents.contract.task import Task
from deepagents.modelcall.attempts import CallContext, ModelAttempts, Refused
from deepagents.modelcall.batching import Batcher, Waiter
from deepagents.modelcall.calls import ModelCalls
from deepagents.modelcall.errors import (
    InvalidRequest,
    ModelCallError,
    ModelDeadlineExceeded,
    ModelUnavailable,
    ResponseTooLarge,
)
from deepagents.modelcall.pricing import cost_usd
from deepagents.modelcall.record import AttemptRecord, EmbeddingReply, prompt_digest
from deepagents.modelcall.usage import current_model_calls, current_usage
from deepagents.modelcall.wrap import call_deadline

MAX_INPUT_CHARS = 1_000_000  # one input; the context gate bounds the batch as a whole


@dataclasses.dataclass(frozen=True, slots=True)
class _Share:
    vectors: tuple[tuple[float, ...], ...]
    records: tuple[AttemptRecord, ...]
    batch_inputs: int


async def embed(
    model: str,
    inputs: Sequence[str],
    *,
    calls: ModelCalls | None = None,
    task: Task | None = None,
    deadline: datetime | None = None,
    tenant: str | None = None,
    agent: str = "unknown",
) -> EmbeddingReply:
    """Embed ``inputs`` with ``model`` (a ``kind: embedding`` model under ``models:``).

    Returns an ``EmbeddingReply``: one vector per input, in order, and this call's share of
    the batch's records. Raises ``InvalidRequest`` for a chat model or empty input,
    ``InputTooLong`` when the batch does not fit the model, ``ModelUnavailable`` /
    ``ModelDeadlineExceeded`` when no answer came (no fallback: other vectors would not
    be comparable).
    """
    calls = calls or current_model_calls()
    if calls is None:
        raise RuntimeError("no ModelCalls: pass calls= or set one with use_model_calls()")
    texts = _checked(inputs)
    runtime = calls.runtime(model)
    if runtime.config.kind is not ModelKind.EMBEDDING:
        raise InvalidRequest(f"model {model!r} is not an embedding model (kind: embedding)")
    loop = asyncio.get_running_loop()
    ends = call_deadline(
        loop, runtime.config.timeouts.total_s, deadline or (task.deadline if task else None)
    )
    tenant = tenant or (task.tenant if task else None)
    waiter = Waiter(texts, ends, loop.create_future())
    _batcher(calls, model, tenant, agent).submit(waiter)
    try:
        async with asyncio.timeout_at(ends):
            share: _Share = await asyncio.shield(waiter.future)
    except TimeoutError:
        raise ModelDeadlineExceeded(f"no embedding from {model!r} before the deadline") from None
    except ModelCallError as error:
        _note(model, error.attempts)
        raise
    _note(model, share.records)
    return EmbeddingReply(
        vectors=share.vectors,
        model=model,
        prompt_sha256=prompt_digest(_messages(texts), calls.prompt_hash_key),
        batch_inputs=share.batch_inputs,
        attempts=share.records,
    )


def _checked(inputs: Sequence[str]) -> list[str]:
    if isinstance(inputs, str):
        raise InvalidRequest("inputs must be a sequence of strings, not one string")
    texts = list(inputs)
    if not texts:
        raise InvalidRequest("inputs must not be empty")
    for text in texts:
        if not isinstance(text, str) or not text or len(text) > MAX_INPUT_CHARS:
            raise InvalidRequest(
                f"each input must be a non-empty string of at most {MAX_INPUT_CHARS} characters"
            )
    return texts


def _messages(texts: Sequence[str]) -> list[dict[str, str]]:
    return [{"role": "user", "content": text} for text in texts]


def _note(model: str, records: tuple[AttemptRecord, ...]) -> None:
    ledger = current_usage()
    if ledger is not None:
        ledger.add(model, records, False)


def _batcher(calls: ModelCalls, model: str, tenant: str | None, agent: str) -> Batcher:
    key = (model, tenant, agent)
    batcher = calls.batchers.get(key)
    if batcher is None:
        config = calls.runtime(model).config

        async def send(batch: list[Waiter]) -> None:
            await _send(calls, model, tenant, agent, batch)

        batcher = calls.batchers[key] = Batcher(config.batching, send)
    return batcher


async def _send(
    calls: ModelCalls, model: str, tenant: str | None, agent: str, batch: list[Waiter]
) -> None:
    texts = [text for waiter in batch for text in waiter.inputs]
    messages = _messages(texts)
    loop = asyncio.get_running_loop()
    ctx = CallContext(
        calls=calls,
        requested=model,
        messages=messages,
        digest=prompt_digest(messages, calls.prompt_hash_key),
        deadline=max(waiter.deadline for waiter in batch),  # each caller keeps its own
        loop=loop,
        max_tokens=1,  # an embedding has no output tokens; 1 is the least a call reserves
        stream=False,
        tenant=tenant,
        agent=agent,
    )
    try:
        done = await ModelAttempts(ctx, calls.runtime(model)).run()
    except Exception as exc:  # every caller gets the same error, none is left waiting
        error = _error(exc, model)
        records = _shares(calls, model, ctx.records, batch)
        for waiter, own in zip(batch, records, strict=True):
            if not waiter.future.done():
                # A copy each (same class, message, code and reason): its own records.
                caller_error = copy.copy(error)
                if isinstance(caller_error, ModelCallError):
                    caller_error.attempts = own
                waiter.future.set_exception(caller_error)
        return
    records = _shares(calls, model, ctx.records, batch)
    start = 0
    for waiter, own in zip(batch, records, strict=True):
        vectors = done.vectors[start : start + len(waiter.inputs)]
        start += len(waiter.inputs)
        if not waiter.future.done():
            waiter.future.set_result(_Share(vectors, own, len(texts)))


def _error(exc: Exception, model: str) -> Exception:
    if isinstance(exc, Refused):
        if exc.reason == "response_too_large":
            return ResponseTooLarge(f"model {model!r}: {exc.reason}", reason=exc.reason)
        if exc.reason == "deadline":
            return ModelDeadlineExceeded(f"model {model!r}: {exc.reason}", reason=exc.reason)
        return ModelUnavailable(f"model {model!r} did not answer ({exc.reason})", reason=exc.reason)
    return exc


def _shares(
    calls: ModelCalls, model: str, records: list[AttemptRecord], batch: list[Waiter]
) -> list[tuple[AttemptRecord, ...]]:
    """Each caller's copy of the batch's records, its tokens and cost in proportion to the
    characters of its inputs (largest remainders: the shares add up to the batch's)."""
    config = calls.runtime(model).config
    weights = [sum(len(text) for text in waiter.inputs) for waiter in batch]
    per_caller: list[list[AttemptRecord]] = [[] for _ in batch]
    for record in records:
        for own, tokens in zip(per_caller, split(record.tokens_in, weights), strict=True):
            own.append(
                dataclasses.replace(
                    record, tokens_in=tokens, tokens_out=0, cost_usd=cost_usd(config, tokens, 0)
                )
            )
    return [tuple(own) for own in per_caller]


def split(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` in integer parts proportional to ``weights``, adding up to ``total``."""
    whole = sum(weights)
    if whole <= 0:
        return [total if i == 0 else 0 for i in range(len(weights))]
    exact = [total * w / whole for w in weights]
    parts = [int(x) for x in exact]
    left = total - sum(parts)
    for i in sorted(range(len(weights)), key=lambda i: exact[i] - parts[i], reverse=True)[:left]:
        parts[i] += 1
    return parts
