"""The wire protocol over gRPC, for ``grpc://`` and ``grpcs://`` URLs (the ``grpc`` extra).

The messages are those of ``docs/remote-agents.proto`` (``rpc/remote_agents_pb2.py``,
generated from it), one rpc per HTTP endpoint, so everything above this module is the same
as over HTTP: the request is the same JSON document (``json_format`` maps it field for field),
and the answer is handed back as JSON for the same validation. Free-shape JSON (payload,
context, output) travels as ``google.protobuf.Struct``: its numbers are doubles, so an
integer in an output comes back as a float. A service whose health sets ``json_bytes`` is
sent the JSON form instead: each request's JSON document in its message's ``json`` field,
and an answer's ``json`` read as the HTTP body would be (a batch's per task, so a malformed
one fails its task only); no Struct is built or walked, and integers stay integers. Status
codes map onto the HTTP rules:

- INVALID_ARGUMENT as a 400: ``invalid_input``, not retried;
- RESOURCE_EXHAUSTED as a 429: retried no sooner than a ``retry-after`` trailer says (our own
  cap on the answer's size, ``max_response_bytes``, is ``remote_protocol_error``);
- UNAVAILABLE, INTERNAL, UNKNOWN, DATA_LOSS, ABORTED and DEADLINE_EXCEEDED as a 5xx or a
  timeout: retried, and counted by the fleet's circuit breaker;
- any other as another 4xx: ``rejected``, not retried.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any
from urllib.parse import urlsplit

import grpc
import orjson
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from deepagents.config.schema import RemoteConfig
from deepagents.errors import InvalidInput, RetryableError
from deepagents.remote.answers import BadAnswer, ReadAnswers, read_json_answers
from deepagents.remote.errors import (
    RemoteRejected,
    ServiceDown,
    ServiceUnreachable,
    hide_addresses,
    mask_secrets,
    protocol_error,
    retry_after_s,
)
from deepagents.remote.rpc import remote_agents_pb2 as pb

log = logging.getLogger("deepagents.remote")

SERVICE = "/deepagents.remote.v1.RemoteAgent/"
STEPS: dict[str, tuple[str, type[Message], type[Message]]] = {
    "can_handle": ("CanHandle", pb.StepRequest, pb.CanHandleResponse),
    "prepare_context": ("PrepareContext", pb.StepRequest, pb.PrepareContextResponse),
    "execute": ("Execute", pb.ExecuteRequest, pb.ExecuteResponse),
    "post_process": ("PostProcess", pb.PostProcessRequest, pb.PostProcessResponse),
    "health": ("Health", pb.HealthRequest, pb.HealthResponse),
    "run": ("Run", pb.StepRequest, pb.RunResponse),
    "run_batch": ("RunBatch", pb.RunBatchRequest, pb.RunBatchResponse),
}
_DOWN = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.ABORTED,
}
# What the client's own cap on the answer's size says (it is RESOURCE_EXHAUSTED too).
_TOO_LARGE = "larger than max"


def _read_file(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _channel(config: RemoteConfig) -> grpc.aio.Channel:
    parts = urlsplit(config.url)
    target = parts.netloc
    options = [
        ("grpc.max_receive_message_length", config.max_response_bytes),
        ("grpc.enable_retries", 0),  # the worker retries, with its backoff and breaker
    ]
    if parts.scheme == "grpc":
        return grpc.aio.insecure_channel(target, options=options)
    tls = config.tls
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read_file(tls.ca if tls else None),
        private_key=_read_file(tls.key if tls else None),
        certificate_chain=_read_file(tls.cert if tls else None),
    )
    return grpc.aio.secure_channel(target, credentials, options=options)


def _request(step: str, body: dict[str, Any]) -> Message:
    """The JSON request as its message; absent values (``null``) stay unset."""
    # The worker's own requests built directly; others (agent-check's invalid one) parsed.
    if step == "run_batch" and all("task" in run for run in body.get("runs") or [{}]):
        return pb.RunBatchRequest(
            protocol=body["protocol"], runs=[_step_request(run) for run in body["runs"]]
        )
    if STEPS[step][1] is pb.StepRequest and "task" in body:
        return _step_request(body)
    fields = _set(body)
    if isinstance(fields.get("runs"), list):  # a batch: each task's request likewise
        fields["runs"] = [_set(run) for run in fields["runs"]]
    return json_format.ParseDict(fields, STEPS[step][1](), ignore_unknown_fields=True)


def _step_request(body: dict[str, Any]) -> pb.StepRequest:
    """A step's request (``run``'s, each of a batch's) built field by field: what
    ``ParseDict`` makes of it, at a fraction of its cost per task (its pure-Python walk of
    the document was most of a gRPC task's cost in the worker)."""
    task = body["task"]
    message = pb.StepRequest(
        protocol=body["protocol"],
        task=pb.WireTask(id=task["id"], intent=task["intent"], tenant=task.get("tenant")),
        attempt=body["attempt"],
        time_left_ms=body.get("time_left_ms"),
        traceparent=body.get("traceparent"),
        idempotency_key=body["idempotency_key"],
    )
    message.task.payload.SetInParent()  # present even when empty, as ParseDict leaves it
    message.task.payload.update(task["payload"])
    return message


def _set(body: dict[str, Any]) -> dict[str, Any]:
    fields = {k: v for k, v in body.items() if v is not None}
    for part in ("task", "result"):  # their optional fields too (not the JSON inside)
        if isinstance(fields.get(part), dict):
            fields[part] = {k: v for k, v in fields[part].items() if v is not None}
    return fields


class GrpcWire:
    """One channel per process (HTTP/2: the calls share its connection)."""

    def __init__(self, config: RemoteConfig, headers: dict[str, str]) -> None:
        # The JSON form: set from the service's health answer (json_bytes), Struct until then.
        self.json_form = False
        self._channel = _channel(config)
        skip = {"content-type", "accept"}
        self._metadata = tuple((k.lower(), v) for k, v in headers.items() if k.lower() not in skip)
        self._calls = {
            step: self._channel.unary_unary(
                SERVICE + rpc,
                request_serializer=request.SerializeToString,
                response_deserializer=response.FromString,
            )
            for step, (rpc, request, response) in STEPS.items()
        }

    async def call(
        self,
        step: str,
        body: dict[str, Any],
        headers: dict[str, str],
        timeout: float,
        by_deadline: bool,
    ) -> bytes:
        """The answer as the JSON document the HTTP endpoint would give, or the error (a
        batch: ``run_batch``)."""
        answer = await self._invoke(step, body, headers, timeout, by_deadline)
        in_json: bytes = getattr(answer, "json", b"")  # the JSON form's answer, if so sent
        if in_json:
            return bytes(in_json)
        if isinstance(answer, pb.RunResponse):
            return orjson.dumps(_run_doc(answer))
        return _message_json(answer)

    async def run_batch(
        self, body: dict[str, Any], timeout: float, by_deadline: bool = False
    ) -> bytes | ReadAnswers:
        """A batch's answer: as ``call``'s, or read per task when some are in the JSON form
        or one of its ``Struct`` answers has no JSON document (a NaN): each then fails
        alone."""
        answer = await self._invoke("run_batch", body, {}, timeout, by_deadline)
        assert isinstance(answer, pb.RunBatchResponse)
        if not any(one.json for one in answer.answers):
            try:
                return orjson.dumps({"answers": [_run_answer(one) for one in answer.answers]})
            except json_format.Error:
                pass  # read per task below
        ids = [one.id for one in answer.answers]
        return read_json_answers(ids, [_answer_json(one) for one in answer.answers])

    async def _invoke(
        self,
        step: str,
        body: dict[str, Any],
        headers: dict[str, str],
        timeout: float,
        by_deadline: bool,
    ) -> Message:
        """The call in the JSON form when the service declared it, else with ``Struct``s.

        A service that declared the JSON form may not read it on every replica (an older
        one behind the same address, a rollback): such a replica sees an empty request and
        refuses it (INVALID_ARGUMENT) or answers an empty batch. The request then goes
        again with ``Struct``s; if that is read, the service gets ``Struct``s until its
        next health answer declares the JSON form again. A refusal of both forms is the
        task's own."""
        if not self.json_form or step == "health":
            return await self._send(step, _request(step, body), headers, timeout, by_deadline)
        in_json = STEPS[step][1](json=orjson.dumps(body))
        with contextlib.suppress(InvalidInput):
            answer = await self._send(step, in_json, headers, timeout, by_deadline)
            if not (isinstance(answer, pb.RunBatchResponse) and not answer.answers):
                return answer
        answer = await self._send(step, _request(step, body), headers, timeout, by_deadline)
        if self.json_form:
            self.json_form = False
            log.warning(
                "remote service declared json_bytes but refused a request in the JSON form "
                "and read it with Structs: Structs until its health declares it again",
                extra={"action": "remote_json_form_refused", "step": step},
            )
        return answer

    async def _send(
        self,
        step: str,
        request: Message,
        headers: dict[str, str],
        timeout: float,
        by_deadline: bool,
    ) -> Message:
        metadata = self._metadata + tuple(headers.items())
        try:
            answer: Message = await self._calls[step](request, timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED and by_deadline:
                raise TimeoutError(f"{step}: the task's deadline passed during the call") from exc
            raise _error(step, exc, timeout) from exc
        return answer

    async def aclose(self) -> None:
        await self._channel.close()


def _message_json(answer: Message) -> bytes:
    text: str = json_format.MessageToJson(
        answer,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
        indent=None,
    )
    return text.encode()


# The one-call answers read field by field: the document MessageToJson gives (the fields
# without presence always, the others when set; a double's NaN and infinities as its
# strings; a Value's refused), without its pure-Python walk per task.
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _run_doc(answer: pb.RunResponse) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if answer.HasField("can_handle"):
        doc["can_handle"] = answer.can_handle
    if answer.HasField("result"):
        doc["result"] = _result(answer.result)
    return doc


def _answer_json(answer: pb.RunAnswer) -> bytes | BadAnswer:
    """One answer of a batch as its JSON document; a ``Struct`` one that has none (a NaN,
    an infinity) as the reason, which fails its task alone."""
    if answer.json:
        return bytes(answer.json)
    try:
        return orjson.dumps(_run_answer(answer))
    except json_format.Error as exc:
        return BadAnswer(str(exc)[:200])


def _run_answer(answer: pb.RunAnswer) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": answer.id}
    if answer.HasField("can_handle"):
        doc["can_handle"] = answer.can_handle
    if answer.HasField("result"):
        doc["result"] = _result(answer.result)
    if answer.HasField("problem"):
        problem = answer.problem
        doc["problem"] = {"type": problem.type}
        for name in ("title", "status", "detail"):
            if problem.HasField(name):
                doc["problem"][name] = getattr(problem, name)
    return doc


def _result(result: pb.WireResult) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "status": result.status,
        "degraded": result.degraded,
        "metrics": {k: _double(v) for k, v in result.metrics.items()},
    }
    if result.HasField("output"):
        doc["output"] = _value(result.output)
    if result.HasField("error"):
        doc["error"] = {"code": result.error.code, "message": result.error.message}
    return doc


def _double(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else _NON_FINITE[value]


def _value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "struct_value":
        return {k: _value(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_value(v) for v in value.list_value.values]
    if kind == "number_value" and not math.isfinite(value.number_value):
        which = "NaN" if math.isnan(value.number_value) else "Infinity"
        raise json_format.SerializeToJsonError(
            f"Failed to serialize output field: Fail to serialize {which} for "
            "Value.number_value, which would parse as string_value."
        )
    return getattr(value, kind)


def _error(step: str, exc: grpc.aio.AioRpcError, timeout: float) -> Exception:
    code, detail = exc.code(), hide_addresses(mask_secrets(exc.details() or ""))
    what = f"{step}: gRPC {code.name}" + (f": {detail[:500]}" if detail else "")
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return ServiceDown(f"{step}: no answer within {timeout:g} s")
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidInput(what)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        if _TOO_LARGE in detail:
            return protocol_error(step, f"response over the size limit ({detail[:200]})")
        trailers = dict(exc.trailing_metadata() or ())
        wait = retry_after_s(str(trailers.get("retry-after", "")))
        return RetryableError(what, retry_after_s=wait)
    if code is grpc.StatusCode.UNAVAILABLE:  # gRPC's refused, reset or 503
        return ServiceUnreachable(what)
    if code in _DOWN:
        return ServiceDown(what)
    return RemoteRejected(what)
