"""``agent-check`` over gRPC: the HTTP requests the checker makes, as rpcs.

``GrpcClient`` answers ``get`` and ``post`` as ``httpx.Client`` would, with the response the
HTTP endpoint of the same step would give: 200 and the answer's JSON document (the worker's
own reading of the message, ``grpc_wire.py``), or the status the gRPC code maps onto. So the
checker's rules hold over gRPC as they are. Like the worker, it sends the JSON form to a
service whose health declares ``json_bytes``, and Structs otherwise (``struct_form`` forces
them, for the ``json_form`` rule).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
from pydantic import ValidationError

from deepagents.config.schema import RemoteConfig
from deepagents.errors import InvalidInput, RemoteProtocolError, RetryableError
from deepagents.remote import wire
from deepagents.remote.answers import ReadAnswers, refused_in
from deepagents.remote.errors import RemoteRejected
from deepagents.remote.grpc_wire import GrpcWire

_JSON = {"content-type": "application/json"}


class GrpcClient:
    def __init__(self, url: str, timeout_s: float) -> None:
        self._timeout = timeout_s
        config = RemoteConfig(url=url, timeout_s=timeout_s)  # refused before a loop exists
        self._loop = asyncio.new_event_loop()
        self.wire: GrpcWire = self._loop.run_until_complete(self._open(config))
        self.declares_json = False

    @staticmethod
    async def _open(config: RemoteConfig) -> GrpcWire:
        return GrpcWire(config, {})  # the channel belongs to the loop it is made in

    def get(self, url: str) -> httpx.Response:
        response = self._call("health", {}, {}, self._timeout)
        if response.status_code == 200:
            with contextlib.suppress(ValidationError):
                health = wire.HealthResponse.model_validate_json(response.content)
                self.declares_json = self.wire.json_form = health.json_bytes
        return response

    def post(
        self, url: str, content: bytes, headers: dict[str, str], timeout: float | None = None
    ) -> httpx.Response:
        step = url.rsplit("/", 1)[-1]
        return self._call(step, orjson.loads(content), headers, timeout or self._timeout)

    @contextlib.contextmanager
    def struct_form(self) -> Iterator[None]:
        """Calls meanwhile send Structs, whatever the service declares."""
        self.wire.json_form = False
        try:
            yield
        finally:
            self.wire.json_form = self.declares_json

    def close(self) -> None:
        self._loop.run_until_complete(self.wire.aclose())
        self._loop.close()

    def _call(
        self, step: str, body: dict[str, Any], headers: dict[str, str], timeout: float
    ) -> httpx.Response:
        metadata = {k: v for k, v in headers.items() if k != "content-type"}
        try:
            if step == wire.RUN_BATCH:
                batch = self.wire.run_batch(body, timeout, True)
                answer = self._loop.run_until_complete(batch)
            else:
                call = self.wire.call(step, body, metadata, timeout, True)
                answer = self._loop.run_until_complete(call)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc)) from exc
        except Exception as exc:
            return httpx.Response(_status(exc), json={"detail": str(exc)})
        return httpx.Response(200, content=_batch_body(answer), headers=_JSON)


def _batch_body(raw: bytes | ReadAnswers) -> bytes:
    """A batch's answer as the HTTP body; a task's answer the wire refuses (not JSON, say)
    breaks the rule that reads it, with the reason."""
    if isinstance(raw, bytes):
        return raw
    for item in raw.items:
        why = refused_in(item) if raw.suspect else None
        if why is not None:
            raise httpx.DecodingError(f"run_batch: task {item['id']}'s answer is refused: {why}")
    return orjson.dumps({"answers": raw.items})


def _status(exc: Exception) -> int:
    """The HTTP status the gRPC error stands for (``grpc_wire.py`` maps them the other way)."""
    if isinstance(exc, InvalidInput):
        return 400
    if isinstance(exc, RemoteRejected):
        return 404 if "UNIMPLEMENTED" in str(exc) else 400
    if isinstance(exc, RemoteProtocolError):
        return 502
    if isinstance(exc, RetryableError) and "RESOURCE_EXHAUSTED" in str(exc):
        return 429
    return 503
