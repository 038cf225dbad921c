"""``agent-check``: does a service follow the remote agent protocol? One verdict per rule.

Rules: ``health`` (GET /v1/health answers the schema), ``schema`` (each step's answer to a
valid request is JSON of its schema), ``invalid_request`` (a request without a task is
refused with a 4xx, not run and not a 5xx), ``deadline`` (an execute with little time left
is answered within it), ``idempotency`` (a repeat with the same key gets the same result),
``one_call`` (``run`` and ``run_batch``, when its health lists them: the schema, the four
steps' result, and in a batch each task answered once, by its id), ``json_form`` (over gRPC,
when its health declares ``json_bytes``: the JSON form gives the Struct form's result).

A ``grpc://`` (or ``grpcs://``) URL is checked over gRPC (``check_grpc.py``), in the form
the worker would use: the JSON form when the service declares it.

A service that lists ``run`` or ``run_batch`` is checked in the form the worker would use
(a batch first), and its four steps only where it lists them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from pydantic import BaseModel, ValidationError

from deepagents._internal.extras import require_extra
from deepagents.contract.task import new_task_id
from deepagents.errors import DeepAgentsError
from deepagents.remote import wire

if TYPE_CHECKING:
    from deepagents.remote.check_grpc import GrpcClient

_JSON = "application/json"
DEADLINE_MS = 500
SLACK_MS = 300  # the network and the service's own overhead, beyond the time left


@dataclass(frozen=True, slots=True)
class Verdict:
    rule: str
    ok: bool
    detail: str = ""


class _Broken(DeepAgentsError):
    """A rule the service breaks (caught by ``check``, never raised out of it)."""


def _envelope(intent: str, payload: dict[str, Any], time_left_ms: int | None) -> dict[str, Any]:
    task_id = new_task_id()
    return {
        "protocol": wire.PROTOCOL_VERSION,
        "task": {"id": task_id, "intent": intent, "payload": payload, "tenant": None},
        "attempt": 1,
        "time_left_ms": time_left_ms,
        "traceparent": None,
        "idempotency_key": f"{task_id}:1",
    }


class Checker:
    def __init__(self, url: str, intent: str, payload: dict[str, Any], timeout_s: float) -> None:
        self.base = url.rstrip("/") + wire.PREFIX
        self.intent, self.payload = intent, payload
        self.http: Any = httpx.Client(timeout=timeout_s, follow_redirects=False)
        self.grpc: GrpcClient | None = None
        if url.startswith("grpc"):
            require_extra("grpc", f"agent-check of {url}")
            from deepagents.remote.check_grpc import GrpcClient

            self.http.close()
            self.http = self.grpc = GrpcClient(url, timeout_s)
        self._methods: frozenset[str] | None = None

    def implements(self, step: str) -> bool:
        """Whether the service implements ``step`` (its health answer's ``methods``; no
        list: all four). A method it leaves out is not called, as a worker would not."""
        if self._methods is None:
            methods: frozenset[str] = frozenset(wire.STEPS)
            try:
                answer = wire.HealthResponse.model_validate_json(
                    self.http.get(f"{self.base}/health").content
                )
            except (httpx.HTTPError, ValidationError):
                pass  # the health rule says what is wrong with it
            else:
                if answer.methods:
                    methods = frozenset(answer.methods)
                    if not methods & {wire.RUN, wire.RUN_BATCH}:
                        methods |= {"execute"}  # the four-call form's one required step
            self._methods = methods
        return step in self._methods

    def close(self) -> None:
        self.http.close()

    def _post(self, step: str, body: dict[str, Any], timeout: float | None = None) -> Any:
        headers = {"content-type": _JSON, "idempotency-key": str(body.get("idempotency_key"))}
        if body.get("time_left_ms") is not None:
            headers["x-deadline-ms"] = str(body["time_left_ms"])
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        return self.http.post(
            f"{self.base}/{step}", content=orjson.dumps(body), headers=headers, **kwargs
        )

    def _answer(self, step: str, response: httpx.Response, model: type[BaseModel]) -> Any:
        if response.status_code != 200:
            raise _Broken(f"{step}: HTTP {response.status_code} to a valid request")
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        if kind != _JSON:
            raise _Broken(f"{step}: content type {kind!r}, not {_JSON}")
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"])) or "body"
            raise _Broken(f"{step}: {where}: {first['msg']}") from exc

    def _form(self) -> str:
        """The call a worker would make for a task: ``run_batch``, ``run`` or ``execute``."""
        for form in (wire.RUN_BATCH, wire.RUN):
            if self.implements(form):
                return form
        return "execute"

    def _result(self, envelope: dict[str, Any]) -> wire.WireResult:
        """A task's result, in the form a worker would use."""
        form = self._form()
        if form == "execute":
            return self._steps(envelope).result
        if form == wire.RUN:
            answer: wire.RunResponse = self._answer(
                wire.RUN, self._post(wire.RUN, envelope), wire.RunResponse
            )
        else:
            (answer,) = self._batch([envelope])
        if not answer.can_handle or answer.result is None:
            raise _Broken(f"{form}: can_handle false for intent {self.intent!r} (give --intent)")
        return answer.result

    def _batch(self, envelopes: list[dict[str, Any]]) -> list[wire.RunAnswer]:
        """The answers of one ``run_batch``, in the order of the tasks sent: each task
        answered once, by its id, with no problem."""
        body = {"protocol": wire.PROTOCOL_VERSION, "runs": envelopes}
        batch: wire.RunBatchResponse = self._answer(
            wire.RUN_BATCH, self._post(wire.RUN_BATCH, body), wire.RunBatchResponse
        )
        by_id: dict[str, wire.RunAnswer] = {}
        for item in batch.answers:
            try:
                answer = wire.RunAnswer.model_validate(item)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(map(str, first["loc"])) or "answer"
                raise _Broken(f"run_batch: an answer: {where}: {first['msg']}") from exc
            if answer.id in by_id:
                raise _Broken(f"run_batch: task {answer.id} answered twice")
            by_id[answer.id] = answer
        out = []
        for envelope in envelopes:
            found = by_id.pop(envelope["task"]["id"], None)
            if found is None:
                raise _Broken("run_batch: a task of the batch has no answer")
            if found.problem is not None:
                raise _Broken(f"run_batch: a valid task answered with a problem: {found.problem}")
            out.append(found)
        if by_id:
            raise _Broken("run_batch: an answer names no task of the batch")
        return out

    def _steps(self, envelope: dict[str, Any]) -> wire.ExecuteResponse:
        """The steps the service implements, in order, as a worker calls them; the execute
        answer."""
        if self.implements("can_handle"):
            can = self._answer(
                "can_handle", self._post("can_handle", envelope), wire.CanHandleResponse
            )
            if not can.can_handle:
                raise _Broken(f"can_handle: false for intent {self.intent!r} (give --intent)")
        execute = {**envelope, "context": self._context(envelope)}
        answer: wire.ExecuteResponse = self._answer(
            "execute", self._post("execute", execute), wire.ExecuteResponse
        )
        if self.implements("post_process"):
            sent = {**envelope, "result": answer.result.model_dump()}
            self._answer("post_process", self._post("post_process", sent), wire.PostProcessResponse)
        return answer

    def _context(self, envelope: dict[str, Any]) -> dict[str, Any]:
        if not self.implements("prepare_context"):
            return {}
        prepared: wire.PrepareContextResponse = self._answer(
            "prepare_context", self._post("prepare_context", envelope), wire.PrepareContextResponse
        )
        return prepared.context

    # the rules ----------------------------------------------------------------------

    def health(self) -> str:
        response = self.http.get(f"{self.base}/health")
        answer = self._answer("health", response, wire.HealthResponse)
        if answer.status != "ok":
            raise _Broken(f"health: status {answer.status!r}")
        return f"ok, version {answer.version}" if answer.version else 'ok (no version: "0")'

    def schema(self) -> str:
        steps = [step for step in wire.STEPS if self.implements(step)]
        if "execute" in steps:
            self._steps(_envelope(self.intent, self.payload, None))
        else:
            self._result(_envelope(self.intent, self.payload, None))
            steps = [self._form()]
        return "all four steps" if len(steps) == 4 else f"{', '.join(steps)} (as its health says)"

    def invalid_request(self) -> str:
        form = wire.RUN if self._form() == wire.RUN else "execute"
        if self._form() == wire.RUN_BATCH:
            body: dict[str, Any] = {"protocol": wire.PROTOCOL_VERSION, "attempt": 1}
            response = self._post(wire.RUN_BATCH, body)  # no runs at all
        else:
            response = self._post(form, {"protocol": wire.PROTOCOL_VERSION, "attempt": 1})
        if not 400 <= response.status_code < 500:
            raise _Broken(f"a request without a task got HTTP {response.status_code}, not 4xx")
        return f"HTTP {response.status_code}"

    def deadline(self) -> str:
        envelope = _envelope(self.intent, self.payload, None)
        form = self._form()
        if form == "execute":
            body = {**envelope, "time_left_ms": DEADLINE_MS, "context": self._context(envelope)}
        elif form == wire.RUN:
            body = {**envelope, "time_left_ms": DEADLINE_MS}
        else:
            runs = [{**envelope, "time_left_ms": DEADLINE_MS}]
            body = {"protocol": wire.PROTOCOL_VERSION, "runs": runs}
        started = time.monotonic()
        try:
            self._post(form, body, timeout=(DEADLINE_MS + SLACK_MS) / 1000)
        except httpx.TimeoutException as exc:
            raise _Broken(f"{form}: no answer within the {DEADLINE_MS} ms left") from exc
        return f"answered in {(time.monotonic() - started) * 1000:.0f} ms"

    def idempotency(self) -> str:
        envelope = _envelope(self.intent, self.payload, None)
        first = self._result(envelope)
        again = self._result(envelope)  # the same task, attempt and key: a duplicate
        if first != again:
            form = self._form()
            raise _Broken(f"{form}: a repeat with the same idempotency key answered differently")
        return "same result"

    def one_call(self) -> str:
        forms = [form for form in (wire.RUN, wire.RUN_BATCH) if self.implements(form)]
        if not forms:
            return "neither run nor run_batch: four calls per task"
        reference = None
        if self.implements("execute"):  # the one-call forms give what the steps give
            reference = self._steps(_envelope(self.intent, self.payload, None)).result
        if wire.RUN in forms:
            answer: wire.RunResponse = self._answer(
                wire.RUN,
                self._post(wire.RUN, _envelope(self.intent, self.payload, None)),
                wire.RunResponse,
            )
            if reference is not None and _work(answer.result) != _work(reference):
                raise _Broken("run: not the result of the four steps")
        if wire.RUN_BATCH in forms:
            envelopes = [_envelope(self.intent, self.payload, None) for _ in range(3)]
            for item in self._batch(envelopes):
                if reference is not None and _work(item.result) != _work(reference):
                    raise _Broken("run_batch: not the result of the four steps")
        return f"{' and '.join(forms)}: one answer per task"

    def json_form(self) -> str:
        if self.grpc is None:
            return "HTTP: JSON already"
        if not self.grpc.declares_json:
            return "json_bytes not declared: Structs"
        in_json = self._result(_envelope(self.intent, self.payload, None))
        with self.grpc.struct_form():
            in_struct = self._result(_envelope(self.intent, self.payload, None))
        if _work(in_json) != _work(in_struct):  # 2 == 2.0: a Struct's doubles compare equal
            raise _Broken(f"{self._form()}: the JSON form's result is not the Struct form's")
        return f"{self._form()}: the JSON and Struct forms give the same result"


def _work(result: wire.WireResult | None) -> tuple[Any, ...]:
    """What a result says of the work (metrics may differ: timings, say)."""
    if result is None:
        return ()
    return (result.status, result.output, result.error)


RULES = (
    "health",
    "schema",
    "invalid_request",
    "deadline",
    "idempotency",
    "one_call",
    "json_form",
)


def check(url: str, intent: str, payload: dict[str, Any], timeout_s: float = 10) -> list[Verdict]:
    checker = Checker(url, intent, payload, timeout_s)
    verdicts = []
    try:
        for rule in RULES:
            try:
                detail = getattr(checker, rule)()
            except _Broken as exc:
                verdicts.append(Verdict(rule, False, str(exc)))
            except httpx.HTTPError as exc:
                verdicts.append(Verdict(rule, False, f"{type(exc).__name__}: {exc}"))
            else:
                verdicts.append(Verdict(rule, True, detail))
    finally:
        checker.close()
    return verdicts
