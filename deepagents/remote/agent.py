"""``RemoteAgent``: the agent contract over HTTP to a service of the wire protocol.

One aiohttp session per process (``http_wire.py``: keep-alive, at most ``max_connections``).
Each call's timeout is the lesser of the configured one and the time left before the task's
deadline; when the deadline is what ran out, the call ends as ``TimeoutError``, which the
worker answers ``deadline_exceeded``. A cancelled call closes its connection, so a slow
service cannot pile up connections. Given a Redis client, every call first asks the fleet's
circuit breaker (``circuit.py``).

A service that implements ``run`` does the whole contract in one call per task; one that
implements ``run_batch`` is sent several tasks per request (``batch.py``). The worker keeps
the delivery protocol of each task either way: only the round trip is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import aiohttp
import orjson
from pydantic import BaseModel, ValidationError

from deepagents._internal.extras import require_extra
from deepagents.config.schema import AgentEntry, RemoteConfig
from deepagents.contract.agent import AgentContract, current_attempt
from deepagents.contract.result import (
    NO_METRICS,
    ErrorCode,
    ErrorInfo,
    Result,
    ResultMetrics,
    ResultStatus,
)
from deepagents.contract.task import Task, utcnow
from deepagents.errors import ConfigError, RetryableError
from deepagents.remote import wire
from deepagents.remote.answers import (
    BadAnswer,
    ReadAnswers,
    SecretMask,
    parse_answer,
    validated,
)
from deepagents.remote.batch import Batcher
from deepagents.remote.circuit import FleetCircuit
from deepagents.remote.errors import (
    ServiceDown,
    ServiceUnhealthy,
    ServiceUnreachable,
    hide_addresses,
    mask_secrets,
    protocol_error,
    status_error,
)
from deepagents.remote.expiry import Expiries
from deepagents.remote.http_wire import Answer, HttpWire, why
from deepagents.store.breaker import BreakerState
from deepagents.store.models import RedisClient

if TYPE_CHECKING:
    from deepagents.remote.grpc_wire import GrpcWire
    from deepagents.remote.pull import LeaseBoard, PullServer

R = TypeVar("R", bound=BaseModel)
_JSON = "application/json"
_ALL_METHODS = frozenset(wire.STEPS)
INTRODUCE_S = 5.0  # the longest a worker's start waits for the service's health answer


class _Delivery:
    """What the calls of one delivery share (post_process is given no task): the task, the
    request fields of every call, and whether one call does the whole contract."""

    __slots__ = ("fields", "task", "whole")

    def __init__(self, task: Task, fields: dict[str, Any]) -> None:
        self.task = task
        self.fields = fields
        self.whole = False


_delivery: ContextVar[_Delivery] = ContextVar("deepagents_remote_delivery")


def _ssl_context(config: RemoteConfig) -> ssl.SSLContext | bool:
    tls = config.tls
    if tls is None:
        return True
    context = ssl.create_default_context(cafile=tls.ca)
    if tls.cert is not None:
        context.load_cert_chain(tls.cert, tls.key)
    return context


def _headers(config: RemoteConfig) -> dict[str, str]:
    headers = {"content-type": _JSON, "accept": _JSON}
    for header, variable in config.headers_from_env.items():
        value = os.environ.get(variable)
        if value is None:
            raise ConfigError(f"header {header} needs ${variable}, which is not set")
        headers[header] = value
    return headers


class RemoteAgent(AgentContract):
    """Subclassed per agent type by ``remote_agent_class`` (name, intents, config).

    ``redis`` (with the deployment's key ``prefix``) puts the fleet's circuit breaker in
    front of the service; without it (in-memory services) each task retries on its own."""

    name = "remote"
    remote: ClassVar[RemoteConfig]

    def __init__(self, *, redis: RedisClient | None = None, prefix: str = "da") -> None:
        config = self.remote
        self._circuit = (
            FleetCircuit(redis, prefix, self.name, config.breaker) if redis is not None else None
        )
        self._grpc = _grpc_wire(config)
        self._timeout = config.timeout_s
        self._max_retry_after_s = config.max_retry_after_s
        self._board: LeaseBoard | None = None
        self._puller: PullServer | None = None
        secret = [v for v in _headers(config).values() if v != _JSON]
        if config.pull is not None:
            secret.append(_pull_token(config))
        # What the worker sends that a service must not hand back to a tenant.
        self._mask = SecretMask(secret)
        if config.pull is not None:
            self._board, self._puller = _pull_side(config, self._mask)
        # Calls wait here, not in the connection pool, so the worker's deadline bounds the
        # wait and the pool never holds a long queue.
        self._slots = asyncio.Semaphore(config.max_connections)
        self._http_limit = config.max_response_bytes
        self._http = HttpWire(
            config.url.rstrip("/") + wire.PREFIX,
            _headers(config),
            _ssl_context(config),
            max_connections=config.max_connections,
            max_response_bytes=config.max_response_bytes,
        )
        # The contract methods the service implements (its /v1/health says), once known;
        # a puller does the whole contract of each task it leases.
        self._methods: frozenset[str] | None = None
        if self._board is not None:
            self._methods = frozenset({wire.RUN})
        self._learning: asyncio.Future[frozenset[str]] | None = None
        batch = config.batch
        self._batch_size = batch.max_tasks
        self._expiries = Expiries()  # the batched tasks' timeouts
        self._batcher = Batcher(
            self._send_batch,
            max_tasks=batch.max_tasks,
            max_wait_s=batch.max_wait_ms / 1000,
            max_answer_bytes=config.max_response_bytes,
            max_requests=batch.max_requests,
            mask=self._mask,
        )

    async def aclose(self) -> None:
        if self._puller is not None:
            await self._puller.aclose()
        await self._batcher.aclose()
        if self._circuit is not None:
            await self._circuit.aclose()
        if self._grpc is not None:
            await self._grpc.aclose()
        await self._http.aclose()

    # the contract ---------------------------------------------------------------------

    async def can_handle(self, task: Task) -> bool:
        if self.intents and task.intent not in self.intents:
            return False
        attempt = current_attempt.get()
        fields = {
            "protocol": wire.PROTOCOL_VERSION,
            "task": {
                "id": task.task_id,
                "intent": task.intent,
                "payload": task.payload,
                "tenant": task.tenant,
            },
            "attempt": attempt,
            "traceparent": task.traceparent,
            "idempotency_key": f"{task.task_id}:{attempt}",
        }
        delivery = _Delivery(task, fields)
        _delivery.set(delivery)
        methods = self._methods
        if methods is None:
            methods = await self._implemented()
        if wire.RUN in methods or wire.RUN_BATCH in methods:
            delivery.whole = True  # one call, in execute, does the whole contract
            return True
        if "can_handle" not in methods:
            return True  # its intents routed it here: that is all a service without it asks
        answer = await self._call(task, "can_handle", {}, wire.CanHandleResponse)
        return answer.can_handle

    async def prepare_context(self, task: Task) -> dict[str, Any]:
        if _delivery.get().whole or "prepare_context" not in await self._implemented():
            return {"task": task, "remote": {}}
        answer = await self._call(task, "prepare_context", {}, wire.PrepareContextResponse)
        return {"task": task, "remote": answer.context}

    async def execute(self, context: dict[str, Any]) -> Result:
        task: Task = context["task"]
        if _delivery.get().whole:
            # The whole contract in one call (or one share of a batch): the service's
            # can_handle said no, or the result its post_process left.
            whole = await self._call(task, wire.RUN, {}, wire.RunResponse)
            if not whole.can_handle or whole.result is None:
                return Result.failed(ErrorCode.REJECTED, f"{self.name} cannot handle this task")
            return _result(whole.result)
        body = {"context": context["remote"]}
        answer = await self._call(task, "execute", body, wire.ExecuteResponse)
        return _result(answer.result)

    async def post_process(self, result: Result) -> Result | dict[str, Any]:
        delivery = _delivery.get()
        if delivery.whole or "post_process" not in await self._implemented():
            return {}
        task = delivery.task
        sent = {
            "status": result.status.value,
            "output": result.output,
            "error": result.error.model_dump() if result.error is not None else None,
            "degraded": result.degraded,
            "metrics": _agent_metrics(result.metrics),
        }
        answer = await self._call(task, "post_process", {"result": sent}, wire.PostProcessResponse)
        if answer.result is not None:
            return _result(answer.result)
        return dict(answer.metrics or {})

    async def health_check(self) -> bool:
        """Healthy when ``GET /v1/health`` says ok and the fleet's circuit is not open;
        otherwise ``ServiceUnhealthy`` says why (the registry keeps the reason). Each check
        also learns again which contract methods the service implements."""
        if self._circuit is not None and await self._circuit.state() is BreakerState.OPEN:
            raise ServiceUnhealthy("remote service: the fleet's circuit breaker is open")
        if self._board is not None:
            if self._board.version:
                type(self).version = self._board.version
            return True  # the service calls in: a puller that is gone opens the circuit
        health = await self._health()
        if health.status != "ok":
            where = "Health rpc" if self._grpc is not None else "GET /v1/health: HTTP 200"
            raise ServiceUnhealthy(f"remote service: {where}, {health.status}")
        return True

    async def introduce(self) -> None:
        """Learn what the service says of itself before the worker registers it: its
        version (and methods). One not answering yet is "0" until a health check hears it;
        one that does not answer within INTRODUCE_S does not hold the worker's start. In
        pull mode, start serving the lease calls (its pullers say their version there)."""
        if self._puller is not None:
            await self._puller.start()
            return
        with contextlib.suppress(ServiceUnhealthy, TimeoutError):
            async with asyncio.timeout(INTRODUCE_S):
                await self._health()

    async def _health(self) -> wire.HealthResponse:
        """The service's health answer (kept: what it implements), or ``ServiceUnhealthy``
        saying why there is none."""
        if self._grpc is not None:
            try:
                raw = await self._grpc.call("health", {}, {}, self._timeout, False)
            except Exception as exc:
                why_not = hide_addresses(str(exc))
                raise ServiceUnhealthy(f"remote service: Health rpc: {why_not}") from exc
            health = wire.HealthResponse.model_validate_json(raw)
        else:
            try:
                answer = await self._http.get("health", self._timeout)
                health = wire.HealthResponse.model_validate_json(answer.body)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise ServiceUnhealthy(f"remote service: GET /v1/health: {why(exc)}") from exc
            except ValidationError as exc:
                what = "remote service: GET /v1/health: not a health answer"
                raise ServiceUnhealthy(what) from exc
            if answer.status != 200:
                raise ServiceUnhealthy(
                    f"remote service: GET /v1/health: HTTP {answer.status}, {health.status}"
                )
        if self._grpc is not None:  # the JSON form, with a service that reads it
            self._grpc.json_form = health.json_bytes
        if health.version:  # gRPC sends none as ""
            # On the class: one per agent type, whose instances all call this one service.
            type(self).version = health.version
        # No list (or an empty one, which is how gRPC sends none): all four.
        methods = frozenset(health.methods or ()) | {"execute"}
        self._methods = methods if health.methods else _ALL_METHODS
        return health

    async def _implemented(self) -> frozenset[str]:
        """The contract methods the service implements: asked once, at a worker's first
        task (concurrent first tasks share the one ``GET /v1/health``), then refreshed by
        every health check. A service that does not answer is taken to implement all four
        for now, as one that does not say (the call's own failure then counts in the
        circuit breaker, as before), and it is asked again at the next task."""
        if self._methods is not None:
            return self._methods
        if self._learning is None:
            self._learning = asyncio.ensure_future(self._learn())
        learning = self._learning
        try:
            return await asyncio.shield(learning)
        finally:
            if learning.done() and self._learning is learning:
                self._learning = None

    async def _learn(self) -> frozenset[str]:
        try:
            await self._health()
        except ServiceUnhealthy:
            return _ALL_METHODS
        return self._methods or _ALL_METHODS

    # one call -------------------------------------------------------------------------

    def _call_timeout(self, task: Task) -> tuple[float, bool, int | None]:
        """A call's timeout, whether the task's deadline set it, and the ms the deadline
        leaves (None without one)."""
        timeout, by_deadline, left_ms = self._timeout, False, None
        if task.deadline is not None:
            left = (task.deadline - utcnow()).total_seconds()
            left_ms = max(0, int(left * 1000))
            if left <= timeout:
                timeout, by_deadline = max(left, 0.001), True
        return timeout, by_deadline, left_ms

    async def _call(self, task: Task, step: str, extra: dict[str, Any], model: type[R]) -> R:
        timeout, by_deadline, left_ms = self._call_timeout(task)
        circuit = self._circuit
        try:
            if circuit is None:
                return await self._send(task, step, extra, model, timeout, by_deadline, left_ms)
            # A circuit read closed moments ago lets the call go without an await.
            permit = circuit.permit_now() or await circuit.permit(task, step, timeout)
            try:
                answer = await self._send(task, step, extra, model, timeout, by_deadline, left_ms)
            except Exception as exc:
                await circuit.record(permit, task, step, exc)  # may raise CircuitOpen
                raise
            if permit.probe:
                await circuit.record(permit, task, step, None)
            else:
                circuit.succeeded(step)
            return answer
        except RetryableError as exc:
            # A service's Retry-After is a floor on the next attempt: never past the
            # configured maximum, nor past the task's deadline (the retry would be late).
            cap = self._max_retry_after_s
            if left_ms is not None:
                cap = min(cap, left_ms / 1000)
            exc.retry_after_s = min(exc.retry_after_s, cap)
            raise

    def _send(
        self,
        task: Task,
        step: str,
        extra: dict[str, Any],
        model: type[R],
        timeout: float,
        by_deadline: bool,
        left_ms: int | None,
    ) -> Awaitable[R]:
        """The call's answer, by the way this service is reached. Not a coroutine: the
        caller awaits the chosen one's own, one coroutine less per call."""
        fields = _delivery.get().fields
        document = {**fields, "time_left_ms": left_ms, **extra}
        if self._board is not None:
            return self._pulled(document, model, timeout, by_deadline)
        if step == wire.RUN and self._batched():
            return self._shared(document, model, timeout, by_deadline)
        return self._send_alone(task, step, document, model, timeout, by_deadline, left_ms)

    async def _send_alone(
        self,
        task: Task,
        step: str,
        document: dict[str, Any],
        model: type[R],
        timeout: float,
        by_deadline: bool,
        left_ms: int | None,
    ) -> R:
        """One request of this task's own, over gRPC or HTTP."""
        headers = {"idempotency-key": document["idempotency_key"]}
        if task.traceparent is not None:
            headers["traceparent"] = task.traceparent
        if left_ms is not None:
            headers["x-deadline-ms"] = str(left_ms)
        if self._grpc is not None:
            async with self._slots:
                raw = await self._grpc.call(step, document, headers, timeout, by_deadline)
            return _validated(step, model, raw, self._mask)
        raw = await self._post(step, orjson.dumps(document), headers, timeout, by_deadline)
        return _validated(step, model, raw, self._mask)

    def _batched(self) -> bool:
        """Whether ``run`` goes in a batch: the service implements ``run_batch``, and batches
        are configured (or it implements no ``run`` to send one task alone)."""
        methods = self._methods or _ALL_METHODS
        if wire.RUN_BATCH not in methods:
            return False
        return self._batch_size > 1 or wire.RUN not in methods

    async def _shared(
        self, document: dict[str, Any], model: type[R], timeout: float, by_deadline: bool
    ) -> R:
        """This task's answer out of a batch, as ``run`` would have answered it."""
        answer = self._batcher.submit(document)
        due = self._expiries.add(answer, timeout)
        try:
            item = await answer
        except TimeoutError as exc:
            if by_deadline:
                raise TimeoutError("run: the task's deadline passed during the call") from exc
            raise ServiceDown(f"run: no answer within {timeout:g} s") from exc
        finally:
            self._expiries.discard(answer, due)
            # Given up (a timeout, a cancelled task): nobody reads the answer any more.
            answer.cancel()
        return self._answered(item, model)

    async def _pulled(
        self, document: dict[str, Any], model: type[R], timeout: float, by_deadline: bool
    ) -> R:
        """This task's answer as a puller completed it (``pull.py``), as ``run`` would have
        answered it."""
        assert self._board is not None
        try:
            item = await self._board.run(document, timeout)
        except TimeoutError as exc:  # the task's deadline came first
            raise TimeoutError("run: the task's deadline passed during the lease") from exc
        except ServiceDown:
            if by_deadline:
                raise TimeoutError("run: the task's deadline passed during the lease") from None
            raise
        return self._answered(item, model)

    def _answered(self, answer: wire.RunAnswer, model: type[R]) -> R:
        """A batch's or a puller's answer of this task (validated, its secrets masked), as
        ``run`` would have answered it."""
        if answer.problem is not None:
            problem = answer.problem
            body = orjson.dumps(problem.model_dump(exclude_none=True))
            raise status_error(wire.RUN, problem.status or 500, None, body, self._mask.text)
        if isinstance(answer, model):  # a RunAnswer is a RunResponse: no second validation
            return answer
        return model.model_validate(answer.model_dump(include={"can_handle", "result"}))

    async def _send_batch(self, runs: list[dict[str, Any]]) -> bytes | ReadAnswers:
        """One ``run_batch`` request; its answer's body, or the error of all its tasks."""
        document = {"protocol": wire.PROTOCOL_VERSION, "runs": runs}
        if self._grpc is not None:
            async with self._slots:
                return await self._grpc.run_batch(document, self._timeout)
        limit = self._http_limit * len(runs)
        return await self._post(
            wire.RUN_BATCH, orjson.dumps(document), {}, self._timeout, False, limit
        )

    async def _post(
        self,
        step: str,
        body: bytes,
        headers: dict[str, str],
        timeout: float,
        by_deadline: bool,
        limit: int | None = None,
    ) -> bytes:
        """The answer's body over HTTP, once it is a 200 of ``application/json``."""
        try:
            async with self._slots:
                answer: Answer = await self._http.post(step, body, headers, timeout, limit)
        except TimeoutError as exc:
            if by_deadline:
                raise TimeoutError(f"{step}: the task's deadline passed during the call") from exc
            raise ServiceDown(f"{step}: no answer within {timeout:g} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ServiceUnreachable(f"{step}: {why(exc)}") from exc
        if answer.status != 200:
            raise status_error(
                step, answer.status, answer.retry_after, answer.body, self._mask.text
            )
        content_type = answer.content_type
        if content_type.split(";")[0].strip().lower() != _JSON:
            wrong = f"content type {content_type[:100]!r}, not {_JSON}"
            raise protocol_error(step, wrong, answer.body, self._mask.text)
        return answer.body


def _validated(step: str, model: type[R], raw: bytes, mask: SecretMask) -> R:
    """The answer as ``model``: parsed strictly (``answers.py``), the worker's secrets
    masked in its strings, then validated; ``RemoteProtocolError`` otherwise."""
    try:
        doc = parse_answer(raw)
    except BadAnswer as exc:
        raise protocol_error(step, f"response refused: {exc}", raw, mask.text) from None
    return validated(step, model, doc, mask, raw)


def _pull_token(config: RemoteConfig) -> str:
    assert config.pull is not None
    variable = config.pull.token_from_env
    token = os.environ.get(variable)
    if not token:
        raise ConfigError(f"pull mode needs its token in ${variable}, which is not set")
    return token


def _pull_side(config: RemoteConfig, mask: SecretMask) -> tuple[LeaseBoard, PullServer]:
    """The lease board and the HTTP endpoint of a pull-mode agent (aiohttp's server:
    imported only then)."""
    from deepagents.remote.pull import LeaseBoard, PullServer

    pull = config.pull
    assert pull is not None
    board = LeaseBoard(
        lease_s=pull.lease_s,
        max_wait_s=pull.max_wait_ms / 1000,
        max_answer_bytes=config.max_response_bytes,
        mask=mask,
    )
    # A completion may carry one answer's worth per task a lease handed out.
    max_body = config.max_response_bytes * 64
    return board, PullServer(board, pull.listen, _pull_token(config), max_body)


def _grpc_wire(config: RemoteConfig) -> GrpcWire | None:
    """The gRPC wire for a ``grpc://`` or ``grpcs://`` URL (imported only then: an extra)."""
    if not config.url.startswith("grpc"):
        return None
    require_extra("grpc", f"the remote agent at {config.url}")
    from deepagents.remote.grpc_wire import GrpcWire

    return GrpcWire(config, _headers(config))


def _agent_metrics(metrics: ResultMetrics) -> dict[str, float]:
    extra = metrics.__pydantic_extra__ or {}
    return {k: float(v) for k, v in extra.items() if isinstance(v, int | float)}


_STATUS = {status.value: status for status in ResultStatus}  # cheaper than ResultStatus(...)


def _result(answer: wire.WireResult) -> Result:
    status = _STATUS[answer.status]
    error = None
    if answer.error is not None:
        # A service's free text: secret-looking values masked, as in its problem bodies.
        message = mask_secrets(answer.error.message[:2000])
        error = ErrorInfo(code=answer.error.code, message=message)
    elif status is ResultStatus.FAILED:
        error = ErrorInfo(code="agent_error", message="the remote agent gave no error")
    if error is None and not answer.degraded and not answer.metrics:
        return Result(status=status, output=answer.output)  # the usual answer: defaults
    return Result(
        status=status,
        output=answer.output,
        error=error,
        degraded=answer.degraded,
        metrics=ResultMetrics.model_validate(answer.metrics) if answer.metrics else NO_METRICS,
    )


def remote_agent_class(name: str, entry: AgentEntry) -> type[RemoteAgent]:
    """The ``RemoteAgent`` class of one configured agent type."""
    if entry.remote is None:
        raise ConfigError("has no remote section", field=f"agents.{name}")
    base: type[RemoteAgent] = RemoteAgent
    if entry.remote.protocol == "a2a":  # an A2A agent (the a2a extra, imported only then)
        require_extra("a2a", f"the A2A agent at {entry.remote.url}")
        from deepagents.remote.a2a_agent import A2ARemoteAgent

        base = A2ARemoteAgent
    attrs = {"name": name, "intents": tuple(entry.intents), "remote": entry.remote}
    return type(f"Remote_{name.replace('-', '_')}", (base,), attrs)
