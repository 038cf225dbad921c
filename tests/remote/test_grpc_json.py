"""The JSON form of the gRPC wire (``json`` bytes fields, declared by ``json_bytes`` in the
health answer): sent only to a service that declares it, integers kept integers, and a
malformed answer in a batch a protocol error of its own task only.

The service is a small gRPC server in the test's own loop: its RunBatch answers each task
with the task's payload as its output, in the form it was asked; a payload
``{"answer": "..."}`` is answered with those bytes as its JSON instead."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from deepagents.contract import Result, ResultStatus, Task
from deepagents.remote.check import check
from deepagents.worker.agent_calls import AgentRunner
from tests.remote.test_one_call import protocol_error, remote, run_together

grpc = pytest.importorskip("grpc")

from deepagents.remote.grpc_wire import SERVICE, STEPS  # noqa: E402 (needs the grpc extra)
from deepagents.remote.rpc import remote_agents_pb2 as pb  # noqa: E402


class Fake:
    """What the service was sent: one entry per RunBatch, "json" or "struct". ``old``: a
    replica that declares nothing it reads, built from the proto before the JSON form: a
    request in that form looks empty to it, and it refuses it (``"refuses"``, as the
    reference agent did) or answers an empty batch (``"empty"``)."""

    def __init__(self, json_bytes: bool, old: str = "") -> None:
        self.json_bytes = json_bytes
        self.old = old
        self.forms: list[str] = []
        self.url = ""

    async def health(self, request: Any, context: Any) -> Any:
        return pb.HealthResponse(status="ok", methods=["run_batch"], json_bytes=self.json_bytes)

    async def run_batch(self, request: Any, context: Any) -> Any:
        if request.json and self.old:
            self.forms.append("json")
            if self.old == "refuses":
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "protocol 0 is not 1")
            return pb.RunBatchResponse()
        if request.json:
            self.forms.append("json")
            runs = orjson.loads(request.json)["runs"]
            return pb.RunBatchResponse(answers=[_json_answer(run) for run in runs])
        self.forms.append("struct")
        answers = []
        for run in request.runs:
            result = pb.WireResult(status="success")
            result.output.struct_value.CopyFrom(run.task.payload)
            answers.append(pb.RunAnswer(id=run.task.id, result=result))
        return pb.RunBatchResponse(answers=answers)


def _json_answer(run: dict[str, Any]) -> Any:
    payload = run["task"]["payload"]
    if "struct_nan" in payload:  # this one answered as a Struct, with a NaN in its output
        result = pb.WireResult(status="success")
        result.output.number_value = float("nan")
        return pb.RunAnswer(id=run["task"]["id"], result=result)
    if "answer" in payload:
        doc = payload["answer"].encode()
    else:
        doc = orjson.dumps({"result": {"status": "success", "output": payload}})
    return pb.RunAnswer(id=run["task"]["id"], json=doc)


def _handler(call: Callable[[Any, Any], Any], step: str) -> Any:
    _, request, response = STEPS[step]
    return grpc.unary_unary_rpc_method_handler(
        call,
        request_deserializer=request.FromString,
        response_serializer=response.SerializeToString,
    )


@pytest.fixture
async def start() -> AsyncIterator[Callable[[bool], Any]]:
    servers = []

    async def started(json_bytes: bool, old: str = "") -> Fake:
        fake = Fake(json_bytes, old)
        server = grpc.aio.server()
        rpcs = {"Health": _handler(fake.health, "health"),
                "RunBatch": _handler(fake.run_batch, "run_batch")}  # fmt: skip
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE.strip("/"), rpcs),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        fake.url = f"grpc://127.0.0.1:{port}"
        return fake

    yield started
    for server in servers:
        await server.stop(None)


async def outputs(fake: Fake, payloads: list[dict[str, Any]]) -> list[Any]:
    agent = remote(fake.url, timeout_s=5)
    try:
        return await run_together(agent, payloads)
    finally:
        await agent.aclose()


async def test_a_service_that_declares_json_bytes_gets_json_and_integers_stay_integers(
    start: Callable[[bool], Any],
) -> None:
    fake = await start(True)
    payload = {"n": 7, "big": 2**62 + 1, "x": 1.5, "l": [1, None, {"k": -3}]}
    (result,) = await outputs(fake, [payload])
    assert fake.forms == ["json"]
    assert isinstance(result, Result) and result.status is ResultStatus.SUCCESS, result
    assert result.output == payload
    assert type(result.output["n"]) is int and type(result.output["l"][2]["k"]) is int
    assert result.output["big"] == 2**62 + 1  # exact: a double would round it


async def test_a_service_that_does_not_declare_it_gets_structs(
    start: Callable[[bool], Any],
) -> None:
    fake = await start(False)
    (result,) = await outputs(fake, [{"n": 7}])
    assert fake.forms == ["struct"]
    assert isinstance(result, Result) and result.status is ResultStatus.SUCCESS, result
    assert result.output == {"n": 7.0} and type(result.output["n"]) is float  # a Struct's


async def test_a_malformed_json_answer_in_a_batch_fails_its_own_task_only(
    start: Callable[[bool], Any],
) -> None:
    fake = await start(True)
    bad: list[dict[str, Any]] = [
        {"answer": '{"result": {"status": "success", "output": '},  # cut short
        {"answer": "[1, 2]"},  # JSON, not an object
        {"answer": '{"result": {"status": "success", "output": NaN}}'},
        {"answer": '{"result": {"status": "success", "output": 123456789012345678901234}}'},
        {"answer": '{"result": {"status": "done"}}'},  # not the schema's
        {"answer": '{"result": {"status": "success", "output": "\\ud800"}}'},  # no such text
        {"struct_nan": True},  # a Struct answer beside JSON ones, with no JSON document
    ]
    outcomes = await outputs(fake, [{"i": 1}, *bad, {"i": 2}])
    assert fake.forms == ["json"]  # one batch
    for good, i in ((outcomes[0], 1), (outcomes[8], 2)):
        assert isinstance(good, Result) and good.output == {"i": i}, good
    protocol_error(outcomes[1], "this task's answer is refused: json: not JSON")
    protocol_error(outcomes[2], "this task's answer is refused: json: not a JSON object")
    protocol_error(outcomes[3], "refused: NaN is not a JSON number")
    protocol_error(outcomes[4], "is outside 64 bits")
    protocol_error(outcomes[5], "does not match the schema (result.status: literal_error)")
    protocol_error(outcomes[6], "surrogates not allowed")
    protocol_error(outcomes[7], "refused: json: Failed to serialize output field")


@pytest.mark.parametrize("old", ["refuses", "empty"])
async def test_a_replica_that_cannot_read_the_json_form_gets_structs_and_no_task_fails(
    start: Callable[..., Any], old: str
) -> None:
    """Behind one address, a replica that declared the JSON form answered the health check
    and an older one the batch (a rollback, a rolling upgrade): the batch goes again with
    Structs, and Structs stay until a health answer declares the form again."""
    fake = await start(True, old)
    agent = remote(fake.url, timeout_s=5)
    try:
        first = await run_together(agent, [{"i": 1}, {"i": 2}])
        with ThreadPoolExecutor(1) as pool:  # no health check in between, unlike run_together
            second = await AgentRunner(agent, pool).run(Task(intent="risk_check", payload={"i": 3}))
        assert fake.forms == ["json", "struct", "struct"]
        await run_together(agent, [{"i": 4}])  # its health check declares the form again
        assert fake.forms[3:] == ["json", "struct"]
    finally:
        await agent.aclose()
    for result, i in zip([*first, second], (1, 2, 3), strict=True):
        assert isinstance(result, Result) and result.output == {"i": float(i)}, result


@pytest.mark.parametrize("json_bytes", [True, False])
async def test_agent_check_checks_the_json_form_when_declared(
    start: Callable[[bool], Any], json_bytes: bool
) -> None:
    fake = await start(json_bytes)
    verdicts = await asyncio.to_thread(check, fake.url, "risk_check", {"n": 2})
    (json_form,) = [v for v in verdicts if v.rule == "json_form"]
    assert json_form.ok, json_form
    if json_bytes:
        assert "same result" in json_form.detail
        assert {"json", "struct"} <= set(fake.forms)
    else:
        assert "not declared" in json_form.detail
        assert set(fake.forms) == {"struct"}


async def test_agent_check_names_a_malformed_json_answer(start: Callable[[bool], Any]) -> None:
    fake = await start(True)
    cut = {"answer": '{"result": {"status": "success", "output": '}
    verdicts = await asyncio.to_thread(check, fake.url, "risk_check", cut)
    broken = {v.rule: v.detail for v in verdicts if not v.ok}
    assert "answer is refused: json: not JSON" in broken["schema"], broken
    assert "answer is refused: json: not JSON" in broken["json_form"], broken
