"""The risk check of ``agents/risk.py`` as a remote agent over gRPC (``docs/remote-agents.proto``,
the ``grpc`` extra): ``python -m agents.remote.python.risk_grpc --port N``.

Each rpc answers with the HTTP reference service's own step (``risk_service.STEPS``), the
request and the answer mapped to and from their messages field for field; a bad request is
INVALID_ARGUMENT, as the HTTP service answers 400 or 422. Its Health sets ``json_bytes``
(unless ``--struct``): a request in the JSON form (its ``json`` field) is the HTTP body as
it is, and is answered in the JSON form too (a batch's answers each with its id beside).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import Any

import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

from agents.remote.python.risk_service import STEPS, VERSION
from deepagents import InvalidInput
from deepagents.remote.grpc_wire import SERVICE
from deepagents.remote.grpc_wire import STEPS as RPCS

NOOP = {"result": {"status": "success", "output": {}}}  # --noop: execute does no work


def _body(request: Message) -> tuple[dict[str, Any], bool]:
    """The request as its JSON document, and whether it came in the JSON form."""
    raw = getattr(request, "json", b"")
    if raw:
        return orjson.loads(raw), True
    return json_format.MessageToDict(request, preserving_proto_field_name=True), False


def _answer(answer: dict[str, Any], response: type[Message], json_form: bool) -> Message:
    if not json_form:
        return json_format.ParseDict(answer, response(), ignore_unknown_fields=True)
    if "answers" not in answer:
        return response(json=orjson.dumps(answer))
    ones = [(one.pop("id"), one) for one in answer["answers"]]
    return response(answers=[{"id": task_id, "json": orjson.dumps(one)} for task_id, one in ones])


def _handler(
    step: str, response: type[Message], noop: bool, methods: list[str], json_bytes: bool
) -> Callable[[Message, Any], Any]:
    async def handle(request: Message, context: grpc.aio.ServicerContext) -> Message:
        if step == "health":
            return response(
                status="ok", methods=methods or list(STEPS), version=VERSION, json_bytes=json_bytes
            )
        if methods and step not in methods:  # as a service that has no such rpc answers
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"no {step} here")
        body, json_form = _body(request)
        if noop and step in ("execute", "run"):
            return _answer(NOOP, response, json_form)
        if noop and step == "run_batch":
            answers = [{"id": run["task"]["id"], **NOOP} for run in body.get("runs", ())]
            return _answer({"answers": answers}, response, json_form)
        for one in [body, *body.get("runs", ())]:
            one.setdefault("task", {}).setdefault("tenant", None)
        try:
            if body.get("protocol") != 1:
                raise ValueError("not a protocol v1 request")
            answer = STEPS[step](body)
        except (InvalidInput, ValueError, KeyError, TypeError, AttributeError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{type(exc).__name__}: {exc}")
        return _answer(answer, response, json_form)

    return handle


def handlers(
    noop: bool = False, methods: list[str] | None = None, json_bytes: bool = True
) -> grpc.GenericRpcHandler:
    """``methods``: the contract methods it implements and says so in Health (None: all
    four, unsaid); the others answer UNIMPLEMENTED. ``json_bytes``: Health says it reads
    the JSON form (it reads either form whatever it says)."""
    rpcs = {
        rpc: grpc.unary_unary_rpc_method_handler(
            _handler(step, response, noop, methods or [], json_bytes),
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )
        for step, (rpc, request, response) in RPCS.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE.strip("/"), rpcs)


async def serve(
    host: str, port: int, noop: bool, methods: list[str] | None, json_bytes: bool
) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handlers(noop, methods, json_bytes),))
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    sys.stdout.write(f"listening {bound}\n")
    sys.stdout.flush()
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8789)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--noop", action="store_true", help="execute and run answer an empty success"
    )
    parser.add_argument(
        "--methods",
        type=lambda text: text.split(","),
        help="execute[,...]: implement only these calls, and say so in Health (default: all "
        "four contract methods, run and run_batch)",
    )
    parser.add_argument(
        "--struct",
        action="store_true",
        help="Health does not say json_bytes: the worker sends Structs (as to an older service)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.methods or ()) - set(STEPS)
    if unknown:
        parser.error(f"--methods: not contract methods: {', '.join(sorted(unknown))}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.noop, args.methods, not args.struct))
    return 0


if __name__ == "__main__":
    sys.exit(main())
