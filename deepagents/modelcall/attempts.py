"""The attempts against one model: gates, admission, the retry loop and the records.

``ModelAttempts.run`` returns the provider's completion (text, tool calls), raises
``Refused`` when this model cannot answer now (the caller moves down the fallback chain),
or raises a terminal ``ModelCallError`` (an over-long input, a request the provider rejects
for good).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from deepagents.contract.toolcalls import ToolDefinition
from deepagents.errors import DeepAgentsError, ErrorCode
from deepagents.modelcall.calls import ModelCalls, ModelRuntime
from deepagents.modelcall.errors import (
    ContentFiltered,
    ContextLengthExceeded,
    CredentialError,
    InputTooLong,
    InvalidRequest,
    ModelCallError,
)
from deepagents.modelcall.pricing import (
    cost_usd,
    estimate_input_tokens,
    estimate_tokens,
    input_tokens_bound,
    sized_messages,
)
from deepagents.modelcall.providers.base import AttemptSpec, Completion
from deepagents.modelcall.record import AttemptRecord
from deepagents.modelcall.retrying import Decision, ErrorKind, ProviderError, retrying, unreachable
from deepagents.store.models.admission import RateLimiter, Reservation
from deepagents.store.models.budget import Hold
from deepagents.store.models.credentials import Credential
from deepagents.store.models.gates import Permit
from deepagents.telemetry.logs import current_task_id

log = logging.getLogger("deepagents.modelcall")

_TERMINAL: dict[ErrorKind, type[ModelCallError]] = {
    ErrorKind.CONTEXT_LENGTH: ContextLengthExceeded,
    ErrorKind.CONTENT_FILTER: ContentFiltered,
    ErrorKind.INVALID: InvalidRequest,
}
# Classes after which another model (or the declared fallback) may still answer.
_MOVE_ON = {
    ErrorKind.SPEND_LIMIT: "provider_spend_limit",
    ErrorKind.AUTH: "auth_failed",
    ErrorKind.RESPONSE_TOO_LARGE: "response_too_large",
}
# A budget hold outlives the call's deadline by this much: settling follows the last attempt.
HOLD_MARGIN_S = 2.0


class Refused(DeepAgentsError):
    """This model cannot answer now; ``reason`` says why (circuit_open, budget_exhausted…)."""

    code = ErrorCode.MODEL_UNAVAILABLE
    retryable = True  # another model, or this one later, may answer

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class CallContext:
    """One ``wrap_model_call``: shared by every model of the chain."""

    calls: ModelCalls
    requested: str
    messages: Sequence[dict[str, Any]]
    digest: str
    deadline: float  # loop.time()
    loop: asyncio.AbstractEventLoop
    max_tokens: int | None = None
    stream: bool | None = None
    tenant: str | None = None
    agent: str = "unknown"
    params: dict[str, Any] = field(default_factory=dict)
    tools: Sequence[ToolDefinition] = ()
    records: list[AttemptRecord] = field(default_factory=list)

    def time_left(self) -> float:
        return self.deadline - self.loop.time()

    def add(self, record: AttemptRecord) -> None:
        self.records.append(record)
        self.calls.metrics.observe(record, self.agent)
        if self.calls.on_record is not None:
            self.calls.on_record(record)
        # The log line names the prompt by its hash only.
        log.info(
            "model_call model=%s attempt=%d outcome=%s status=%s detail=%s request_id=%s "
            "prompt=%s tokens_in=%d tokens_out=%d total_ms=%s",
            record.model,
            record.attempt,
            record.outcome,
            record.status_code,
            record.detail,
            record.request_id,
            record.prompt_sha256,
            record.tokens_in,
            record.tokens_out,
            None if record.total_ms is None else round(record.total_ms, 1),
            extra={"action": "model_call", "model": record.model, "outcome": record.outcome},
        )


class ModelAttempts:
    def __init__(self, ctx: CallContext, runtime: ModelRuntime) -> None:
        self.ctx = ctx
        self.rt = runtime
        cfg = runtime.config
        sized = sized_messages(ctx.messages, ctx.tools)
        self.est_in = estimate_input_tokens(sized, cfg.chars_per_token)  # likely size
        self.bound_in = max(self.est_in, input_tokens_bound(sized))  # what is reserved
        self.max_out = max(
            1,
            min(ctx.max_tokens or cfg.max_tokens, cfg.max_tokens, cfg.context_tokens - self.est_in),
        )
        self.refreshed = False
        self.last: Decision | None = None
        self.spent_usd = 0.0  # every attempt's cost, settled against the budget hold
        self.hold: Hold | None = None
        self.held_extra_usd = 0.0  # what the hold was grown by, beyond one attempt's worst
        self.sent = False  # a request reached the provider: it counts against the quota

    async def run(self) -> Completion:
        cfg = self.rt.config
        if self.est_in >= cfg.context_tokens:
            raise InputTooLong(
                f"input of about {self.est_in} tokens does not fit model {self.rt.name!r} "
                f"(context limit {cfg.context_tokens} tokens); no call was made"
            )
        self._need_time()
        hold = await self.rt.budget.reserve(
            self.ctx.tenant,
            self.ctx.agent,
            cost_usd(cfg, self.bound_in, self.max_out),
            hold_s=self.ctx.time_left() + HOLD_MARGIN_S,
        )
        if isinstance(hold, str):
            self._refuse(hold)
        self.hold = hold
        try:
            return await self._attempts()
        finally:
            await self.rt.budget.settle(self.hold, self.spent_usd, int(self.sent))

    async def _attempts(self) -> Completion:
        cfg = self.rt.config
        policy = retrying(
            cfg.retry,
            time_left_s=self.ctx.time_left,
            min_attempt_s=cfg.timeouts.min_attempt_s,
            on_decision=self._decided,
        )
        try:
            async for attempt in policy:
                with attempt:
                    return await self._attempt(attempt.retry_state.attempt_number)
        except ProviderError as error:
            raise self._final(error) from None
        raise AssertionError("tenacity stopped without an outcome")  # pragma: no cover

    def _decided(self, decision: Decision) -> None:
        self.last = decision

    def _final(self, error: ProviderError) -> Exception:
        terminal = _TERMINAL.get(error.kind)
        if terminal is not None:
            return terminal(
                f"model {self.rt.name!r} rejected the request: {error.detail}",
                reason=error.kind.value,
            )
        if error.kind in _MOVE_ON:
            return Refused(_MOVE_ON[error.kind])
        reason = self.last.reason if self.last is not None else "retries_exhausted"
        if reason in ("deadline", "retry_after_too_long"):
            return Refused(reason)
        # The model kept asking for tools wrongly: say so, not just that retries ran out.
        return Refused(
            "bad_tool_call" if error.kind is ErrorKind.BAD_TOOL_CALL else "retries_exhausted"
        )

    def _need_time(self) -> None:
        """No attempt starts that cannot finish before the deadline."""
        if self.ctx.time_left() <= max(self.rt.config.timeouts.min_attempt_s, 0.001):
            self._refuse("deadline")

    def _refuse(self, reason: str) -> NoReturn:
        self.ctx.add(
            AttemptRecord(
                model=self.rt.name,
                attempt=0,
                outcome="refused",
                prompt_sha256=self.ctx.digest,
                detail=reason,
                started_at=self.ctx.loop.time(),
            )
        )
        raise Refused(reason)

    async def _attempt(self, number: int) -> Completion:
        self._need_time()
        await self._cover_billed()
        credential = await self._credential()
        async with self._admitted(credential) as reservations:
            permit = await self.rt.breaker.allow(probe_ttl_s=max(self.ctx.time_left(), 0.001))
            if not permit.allowed:
                await self._undo(reservations)
                self._refuse("circuit_open")
            return await self._send(number, permit, credential, reservations)

    async def _cover_billed(self) -> None:
        """Before a retry, the hold grows by what earlier attempts were billed (the partial
        output of a stalled stream), so the retry's worst case is still held in full."""
        extra = self.spent_usd - self.held_extra_usd
        if self.hold is None or extra <= 0:
            return
        grown = await self.rt.budget.extend(self.hold, self.ctx.tenant, self.ctx.agent, extra)
        if isinstance(grown, str):
            self._refuse(grown)
        self.hold, self.held_extra_usd = grown, self.spent_usd

    async def _credential(self) -> Credential | None:
        if self.rt.credentials is None:
            return None
        try:
            return await self.rt.credentials.current()
        except CredentialError:
            self._refuse("credential_error")

    @contextlib.asynccontextmanager
    async def _admitted(
        self, credential: Credential | None
    ) -> AsyncIterator[list[tuple[RateLimiter, Reservation]]]:
        """Process semaphore, then the fleet lease, then rate reservations: reserving last
        keeps the reservation close to the send, so the window counts the request about
        when the provider sees it."""
        try:
            async with asyncio.timeout_at(self.ctx.deadline):
                await self.rt.semaphore.acquire()
        except TimeoutError:
            self._refuse("deadline")
        lease: str | None = None
        try:
            lease = await self._fleet_lease()
            yield await self._reserve_all(credential)
        finally:
            if lease is not None and self.rt.fleet is not None:
                await self.rt.fleet.release(lease)
            self.rt.semaphore.release()

    async def _fleet_lease(self) -> str | None:
        if self.rt.fleet is None:
            return None
        while True:
            lease = await self.rt.fleet.try_acquire(ttl_s=self.ctx.time_left() + 1)
            if lease is not None:
                return lease
            await self._pause(0.01 + random.random() * 0.02, "concurrency")

    async def _reserve_all(
        self, credential: Credential | None
    ) -> list[tuple[RateLimiter, Reservation]]:
        limiters = [
            self.rt.limiter,
            self.rt.key_limiter(
                self.ctx.calls.redis,
                self.ctx.calls.prefix,
                credential.secret if credential else None,
            ),
        ]
        reservations: list[tuple[RateLimiter, Reservation]] = []
        try:
            for limiter in limiters:
                if limiter is not None and limiter.active:
                    reservations.append((limiter, await self._reserve(limiter)))
        except BaseException:
            await self._undo(reservations)
            raise
        return reservations

    async def _reserve(self, limiter: RateLimiter) -> Reservation:
        # An upper bound, corrected after the answer; at most the whole window when only
        # the bound, not the likely size, is over it.
        want = limiter.clamp(self.bound_in + self.max_out, floor=self.est_in + self.max_out)
        while True:
            admission = await limiter.try_admit(want)
            if admission.reservation is not None:
                return admission.reservation
            if admission.wait_s < 0:
                self._refuse("exceeds_rate_limit")
            # Jitter spreads the waiters so they do not all retry at the same instant.
            jitter = random.random() * 0.1
            await self._pause(admission.wait_s + jitter, "rate_limited")

    async def _pause(self, seconds: float, reason: str) -> None:
        if seconds + self.rt.config.timeouts.min_attempt_s >= self.ctx.time_left():
            self._refuse(reason)
        await asyncio.sleep(seconds)

    @staticmethod
    async def _undo(reservations: list[tuple[RateLimiter, Reservation]]) -> None:
        for limiter, reservation in reservations:
            await limiter.correct(reservation, 0)

    def _spec(self, credential: Credential | None) -> AttemptSpec:
        cfg = self.rt.config
        stream = cfg.stream if self.ctx.stream is None else self.ctx.stream
        deadline = self.ctx.deadline
        if not stream:  # one hung plain attempt must leave time for a retry
            deadline = min(deadline, self.ctx.loop.time() + cfg.timeouts.plain_attempt_s())
        return AttemptSpec(
            url=self.rt.url,
            model_id=cfg.model_id(self.rt.name),
            messages=self.ctx.messages,
            max_tokens=self.max_out,
            stream=stream,
            api_key=credential.secret if credential else None,
            request_id=uuid.uuid4().hex,  # fresh on every attempt: retries are distinct requests
            deadline=deadline,
            connect_s=cfg.timeouts.connect_s,
            first_token_s=cfg.timeouts.first_token_s,
            per_token_s=cfg.timeouts.per_token_s,
            extra=self.ctx.params,
            max_response_bytes=cfg.max_response_bytes,
            max_line_bytes=cfg.max_sse_line_bytes,
            tools=self.ctx.tools,
            max_tool_call_bytes=cfg.max_tool_call_bytes,
        )

    async def _send(
        self,
        number: int,
        permit: Permit,
        credential: Credential | None,
        reservations: list[tuple[RateLimiter, Reservation]],
    ) -> Completion:
        spec = self._spec(credential)
        started = self.ctx.loop.time()
        self.sent = True
        try:
            done = await self.rt.provider.complete(self.ctx.calls.client(), spec)
        except ProviderError as error:
            error.request_id = spec.request_id
            await self._failed(number, error, permit, credential, started)
            raise
        await self._succeeded(number, done, permit, spec, started, reservations)
        return done

    def _base(self, number: int, request_id: str, started: float) -> dict[str, Any]:
        return {
            "model": self.rt.name,
            "attempt": number,
            "prompt_sha256": self.ctx.digest,
            "request_id": request_id,
            "retries": number - 1,
            "started_at": started,
            "wait_before_s": self.last.delay_s if self.last and number > 1 else 0.0,
        }

    async def _succeeded(
        self,
        number: int,
        done: Completion,
        permit: Permit,
        spec: AttemptSpec,
        started: float,
        reservations: list[tuple[RateLimiter, Reservation]],
    ) -> None:
        cfg = self.rt.config
        estimated = done.tokens_in is None or done.tokens_out is None
        tokens_in = self.est_in if done.tokens_in is None else done.tokens_in
        tokens_out = (
            estimate_tokens(done.text + _calls_text(done), cfg.chars_per_token)
            if done.tokens_out is None
            else done.tokens_out
        )
        cost = cost_usd(cfg, tokens_in, tokens_out)
        self.spent_usd += cost
        self.ctx.add(
            AttemptRecord(
                **self._base(number, spec.request_id, started),
                outcome="ok",
                status_code=done.status_code,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                tokens_estimated=estimated,
                model_version=done.model_version,
                connect_ms=done.connect_ms,
                first_token_ms=done.first_token_ms,
                total_ms=done.total_ms,
                cost_usd=cost,
                detail=done.finish_reason,
            )
        )
        for limiter, reservation in reservations:
            used = tokens_in + tokens_out
            if used > reservation.tokens:
                # Debt: charged before this call's slot is freed, so the next admission sees it.
                await limiter.correct(reservation, used)
            else:  # returns unused capacity to the window: it need not delay the answer
                await self.ctx.calls.after(limiter.correct(reservation, used))
        if permit.probe:
            await self.rt.breaker.record(True, probe=True)  # closes it before we answer
        elif self.rt.breaker.note_success():
            # A success in a closed circuit only feeds the window: no need to wait for it.
            await self.ctx.calls.after(self.rt.breaker.flush())

    async def _failed(
        self,
        number: int,
        error: ProviderError,
        permit: Permit,
        credential: Credential | None,
        started: float,
    ) -> None:
        timing = error.timing
        # A stream that broke mid-way was generated (and billed) up to there: estimate it.
        partial = error.partial_tokens
        tokens_in = self.est_in if partial else 0
        self.spent_usd += cost_usd(self.rt.config, tokens_in, partial)
        self.ctx.add(
            AttemptRecord(
                **self._base(number, error.request_id or "", started),
                outcome=error.kind.value,
                status_code=error.status,
                detail=error.detail,
                tokens_in=tokens_in,
                tokens_out=partial,
                tokens_estimated=bool(partial),
                cost_usd=cost_usd(self.rt.config, tokens_in, partial),
                connect_ms=timing.get("connect_ms"),
                first_token_ms=timing.get("first_token_ms"),
                total_ms=timing.get("total_ms"),
            )
        )
        # Only failures that say the model is unwell feed the breaker; a probe is always
        # resolved, since any answer from the server ends the half-open state.
        # A failure counts once per task in the window (one poison task does not open it for
        # the others; outside a task each counts); one that finds no server feeds the streak.
        unwell = error.kind is ErrorKind.TRANSIENT
        if unwell or permit.probe:
            await self.rt.breaker.record(
                not unwell, probe=permit.probe, down=unreachable(error), task=current_task_id.get()
            )
        if error.kind is ErrorKind.AUTH:
            await self._refresh(error, credential)

    async def _refresh(self, error: ProviderError, credential: Credential | None) -> None:
        """A 401 earns one credential refresh (fleet-wide, under a lock) and one retry."""
        if self.refreshed or credential is None or self.rt.credentials is None:
            return  # the 401 stands: _final moves on to the next model
        self.refreshed = True
        try:
            await self.rt.credentials.refresh(
                credential.version, timeout_s=max(0.1, self.ctx.time_left())
            )
        except CredentialError:
            # Bounded: one refresh per call, no 401 -> refresh -> 401 loop.
            self._refuse("credential_refresh_failed")
        raise ProviderError(ErrorKind.AUTH, "credential_refreshed", status=401) from error


def _calls_text(done: Completion) -> str:
    """What the tool calls of an answer weigh, for the estimate when usage is missing."""
    return "".join(call.name + str(call.arguments) for call in done.tool_calls)
