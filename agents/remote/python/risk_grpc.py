"""The risk check of ``agents/risk.py`` as a remote agent over gRPC (``docs/remote-agents.proto``,
the ``grpc`` extra): ``python -m agents.remote.python.risk_grpc --port N``.

Each rpc answers with the HTTP reference service's own step (``risk_service.STEPS``), the
request and the answer mapped to and from their messages field for field; a bad request is
INVALID_ARGUMENT, as the HTTP service answers 400 or 422.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from agents.remote.python.risk_service import STEPS, VERSION
from deepagents import InvalidInput
from deepagents.remote.grpc_wire import SERVICE
from deepagents.remote.grpc_wire import STEPS as RPCS

NOOP = {"result": {"status": "success", "output": {}}}  # --noop: execute does no work


def _handler(
    step: str, response: type[Message], noop: bool, methods: list[str]
) -> Callable[[Message, Any], Any]:
    async def handle(request: Message, context: grpc.aio.ServicerContext) -> Message:
        if step == "health":
            return response(status="ok", methods=methods or list(STEPS), version=VERSION)
        if methods and step not in methods:  # as a service that has no such rpc answers
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"no {step} here")
        body = json_format.MessageToDict(request, preserving_proto_field_name=True)
        if noop and step in ("execute", "run"):
            return json_format.ParseDict(NOOP, response())
        if noop and step == "run_batch":
            answers = [{"id": run["task"]["id"], **NOOP} for run in body.get("runs", ())]
            return json_format.ParseDict({"answers": answers}, response())
        for one in [body, *body.get("runs", ())]:
            one.setdefault("task", {}).setdefault("tenant", None)
        try:
            if body.get("protocol") != 1:
                raise ValueError("not a protocol v1 request")
            answer = STEPS[step](body)
        except (InvalidInput, ValueError, KeyError, TypeError, AttributeError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{type(exc).__name__}: {exc}")
        return json_format.ParseDict(answer, response(), ignore_unknown_fields=True)

    return handle


def handlers(noop: bool = False, methods: list[str] | None = None) -> grpc.GenericRpcHandler:
    """``methods``: the contract methods it implements and says so in Health (None: all
    four, unsaid); the others answer UNIMPLEMENTED."""
    rpcs = {
        rpc: grpc.unary_unary_rpc_method_handler(
            _handler(step, response, noop, methods or []),
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )
        for step, (rpc, request, response) in RPCS.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE.strip("/"), rpcs)


async def serve(host: str, port: int, noop: bool, methods: list[str] | None) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handlers(noop, methods),))
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
    args = parser.parse_args(argv)
    unknown = set(args.methods or ()) - set(STEPS)
    if unknown:
        parser.error(f"--methods: not contract methods: {', '.join(sorted(unknown))}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.noop, args.methods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
