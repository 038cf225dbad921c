"""The gRPC transport (the ``grpc`` extra, ``grpc://`` URLs): the Python reference agent over
gRPC gives the in-process RiskAgent's answers through the same adapter, a service down is
retried and opens the fleet's circuit, and the generated messages are the ``.proto``'s."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig
from deepagents.contract import ResultStatus, Task
from deepagents.errors import CircuitOpen
from deepagents.remote import RemoteAgent, remote_agent_class
from deepagents.remote.errors import ServiceDown, ServiceUnhealthy
from tests.remote.conftest import Service, _start, _stop
from tests.remote.test_one_call import same_answers_at_once
from tests.remote.test_reference_agents import executor, same_answers
from tests.support.procs import REPO

grpc = pytest.importorskip("grpc")

__all__ = ["executor"]  # the fixture, shared with the HTTP reference agents' test
RPC = REPO / "deepagents" / "remote" / "rpc"
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip


def _start_grpc(*extra: str) -> Service:
    command = [sys.executable, "-m", "agents.remote.python.risk_grpc", "--port", "0", *extra]
    service = _start(command, {}, None)
    service.url = f"grpc://127.0.0.1:{service.port}"
    return service


async def contract(agent: RemoteAgent, task: Task) -> None:
    """The contract's calls as the worker makes them (one ``run_batch`` share, by default)."""
    assert await agent.can_handle(task)
    await agent.execute(await agent.prepare_context(task))


@pytest.fixture(params=["json", "struct"])
def grpc_agent(request: pytest.FixtureRequest) -> Iterator[Service]:
    """The Python agent over gRPC, sent the JSON form (its health says json_bytes) or, with
    ``--struct``, the Struct form an older service gets."""
    service = _start_grpc(*(["--struct"] if request.param == "struct" else []))
    yield service
    _stop(service)


async def test_the_python_agent_over_grpc_answers_as_the_risk_agent(
    grpc_agent: Service, executor: ThreadPoolExecutor
) -> None:
    await same_answers(grpc_agent, executor)


async def test_over_grpc_tasks_at_once_share_run_batch_requests_and_answer_alike(
    grpc_agent: Service, executor: ThreadPoolExecutor
) -> None:
    await same_answers_at_once(grpc_agent, executor)


async def test_a_grpc_service_down_is_retried_opens_the_circuit_and_is_unhealthy(
    grpc_agent: Service, client: Redis, prefix: str
) -> None:
    breaker = {"min_calls": 3, "failure_rate": 0.5, "cooldown_s": 30, "state_cache_s": 0}
    remote = {"url": grpc_agent.url, "timeout_s": 5, "breaker": breaker}
    entry = FileConfig.model_validate(
        {"agents": {"risk-grpc": {"intents": ["risk_check"], "remote": remote}}}
    ).agents["risk-grpc"]
    agent = remote_agent_class("risk-grpc", entry)(redis=client, prefix=prefix)
    try:
        assert await agent.health_check()
        _stop(grpc_agent)
        for _ in range(2):
            with pytest.raises(ServiceDown, match="UNAVAILABLE"):
                await contract(agent, Task(intent="risk_check", payload=ORDER))
        # The third opens it: that task waits, its delivery not counted, as if refused.
        with pytest.raises(CircuitOpen):
            await contract(agent, Task(intent="risk_check", payload=ORDER))
        with pytest.raises(CircuitOpen):
            await contract(agent, Task(intent="risk_check", payload=ORDER))
        with pytest.raises(ServiceUnhealthy):
            await agent.health_check()
    finally:
        await agent.aclose()


@pytest.mark.parametrize("methods", ["execute", "prepare_context,execute", "run"])
async def test_over_grpc_only_the_methods_health_lists_are_called(
    methods: str, client: Redis, prefix: str
) -> None:
    """Health's ``methods`` over gRPC, as ``/v1/health``'s over HTTP: the service answers
    UNIMPLEMENTED for the others, so a call to one fails the task; the contract runs and
    answers as the in-process RiskAgent does."""
    service = _start_grpc("--methods", methods)
    remote = {"url": service.url, "timeout_s": 5}
    entry = FileConfig.model_validate(
        {"agents": {"risk-grpc": {"intents": ["risk_check"], "remote": remote}}}
    ).agents["risk-grpc"]
    agent = remote_agent_class("risk-grpc", entry)(redis=client, prefix=prefix)
    task = Task(intent="risk_check", payload=ORDER)
    try:
        assert await agent.can_handle(task)
        result = await agent.execute(await agent.prepare_context(task))
        assert await agent.post_process(result) == {}
    finally:
        await agent.aclose()
        _stop(service)
    assert result.status is ResultStatus.SUCCESS, result.error
    assert result.output["margin"] == "288036.00"


def test_the_generated_messages_are_the_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    proto = tmp_path / "remote_agents.proto"
    proto.write_bytes((REPO / "docs" / "remote-agents.proto").read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}",
               f"--python_out={out}", f"--pyi_out={out}", str(proto)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    for name in ("remote_agents_pb2.py", "remote_agents_pb2.pyi"):
        assert (out / name).read_text() == (RPC / name).read_text(), (
            f"deepagents/remote/rpc/{name} is not what docs/remote-agents.proto generates "
            "(regenerate it: deepagents/remote/rpc/__init__.py says how)"
        )


@pytest.mark.parametrize("step", ["run", "can_handle", "run_batch"])
def test_a_request_built_field_by_field_is_the_message_parse_dict_makes(step: str) -> None:
    """The hot steps' requests are built directly, not through json_format: the bytes on
    the wire are the same as ParseDict's of the same document, whatever the optional
    fields and the payload's JSON types."""
    from google.protobuf import json_format

    from deepagents.remote.grpc_wire import STEPS, _request, _set

    payloads = [{}, {"a": 1, "b": [1, 2.5, None, True, "x", {"c": {}}], "d": None, "e": False},
                {"ü": "é", "big": 2**62, "neg": -3}]  # fmt: skip
    runs = [
        {
            "protocol": 1,
            "task": {"id": "t1", "intent": "risk_check", "payload": payload, "tenant": tenant},
            "attempt": 2,
            "traceparent": traceparent,
            "idempotency_key": "t1:2",
            "time_left_ms": left,
        }
        for payload in payloads
        for tenant in (None, "acme")
        for left in (None, 0, 123_456_789_012)
        for traceparent in (None, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    ]
    documents = [{"protocol": 1, "runs": runs}] if step == "run_batch" else runs
    for document in documents:
        fields = _set(document)
        if step == "run_batch":
            fields["runs"] = [_set(run) for run in fields["runs"]]
        expected = json_format.ParseDict(fields, STEPS[step][1](), ignore_unknown_fields=True)
        built = _request(step, document)
        assert built.SerializeToString(deterministic=True) == expected.SerializeToString(
            deterministic=True
        ), document


def test_a_one_call_answer_read_field_by_field_is_the_document_message_to_json_gives() -> None:
    """run's and run_batch's answers are read without json_format: the document is the one
    MessageToJson gives of the same message (set and unset optional fields, nested output,
    non-finite metrics), and an output holding NaN is refused as MessageToJson refuses it."""
    import json

    from google.protobuf import json_format
    from google.protobuf.message import Message

    from deepagents.remote.grpc_wire import _run_answer, _run_doc
    from deepagents.remote.rpc import remote_agents_pb2 as pb

    def reference(message: Message) -> object:
        doc = json.loads(
            json_format.MessageToJson(
                message,
                preserving_proto_field_name=True,
                always_print_fields_with_no_presence=True,
                indent=None,
            )
        )
        # The JSON form's field (unset here: "") is read apart, not as part of the answer.
        for one in [doc, *doc.get("answers", ())]:
            assert one.pop("json", "") == ""
        return doc

    full = pb.WireResult(status="partial", degraded=True, error=pb.WireError(code="x", message="m"))
    full.metrics.update({"a": 1.0, "b": 2.5, "nan": math.nan, "inf": math.inf, "-inf": -math.inf})
    full.output.struct_value.update({"n": 1, "s": "é", "l": [1, None, True, {"d": []}], "z": None})
    empty = pb.WireResult(status="success")
    empty.output.struct_value.SetInParent()
    answers = [
        pb.RunAnswer(id="a", result=full),
        pb.RunAnswer(id="b", result=empty),
        pb.RunAnswer(id="c", result=pb.WireResult(status="failed")),  # no output
        pb.RunAnswer(id="d", can_handle=False),
        pb.RunAnswer(id="e", problem=pb.Problem(type="about:blank", status=422, detail="no")),
        pb.RunAnswer(id="f", problem=pb.Problem()),
    ]
    batch = pb.RunBatchResponse(answers=answers)
    read = {"answers": [_run_answer(one) for one in batch.answers]}
    assert orjson.loads(orjson.dumps(read)) == reference(batch)
    for one in (pb.RunResponse(result=full), pb.RunResponse(can_handle=False), pb.RunResponse()):
        assert orjson.loads(orjson.dumps(_run_doc(one))) == reference(one)
    bad = pb.RunResponse(result=pb.WireResult(status="success"))
    bad.result.output.number_value = math.nan
    with pytest.raises(json_format.SerializeToJsonError, match="NaN"):
        reference(bad)
    with pytest.raises(json_format.SerializeToJsonError, match="NaN"):
        _run_doc(bad)
