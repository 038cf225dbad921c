"""One pooled session to one MCP server, reconnected on failure.

The SDK's ``Client`` runs its receive loop in an anyio task group that must be entered and
left by the same task, so each connection lives in a task of its own (``_hold``); calls
from any task of the loop go through it. A connection that breaks (the server died, the
stream closed, a line that is no JSON-RPC) is dropped: the calls on it fail with a clear
error, and the next call connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import ValidationError

from deepagents.config.schema import McpServerConfig
from deepagents.tools.errors import (
    ToolCallError,
    ToolFailed,
    ToolProtocolError,
    ToolUnavailable,
)

log = logging.getLogger("deepagents.tools.mcp")
# The idempotency key travels in the request's _meta under this name.
IDEMPOTENCY_META = "io.deepagents/idempotency-key"


class _OneLine(logging.Filter):
    """The SDK logs a server's garbled line with a traceback; a bad server is one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {error}"[:500]
            record.args = None
            record.exc_info = None
        return True


for _name in ("mcp.client.stdio", "mcp.client.streamable_http", "mcp.shared.jsonrpc_dispatcher"):
    logging.getLogger(_name).addFilter(_OneLine())


class _Connection:
    """One connection's state: its client once the handshake is done, the event that ends
    it, and the future its calls watch (set with the error that broke it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.client: Any = None
        self.stop = asyncio.Event()
        self.broken: asyncio.Future[ToolCallError] = loop.create_future()
        self.owner: asyncio.Task[None] | None = None

    def fail(self, error: ToolCallError) -> None:
        if not self.broken.done():
            self.broken.set_result(error)
        self.stop.set()


class McpSession:
    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name, self.config = name, config
        self._conn: _Connection | None = None
        self._lock = asyncio.Lock()
        self.connects = 0  # connections made (a reconnect counts)

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.client is not None

    async def _connection(self) -> _Connection:
        """The live connection, connecting first when there is none."""
        conn = self._conn
        if conn is not None and not conn.broken.done():
            return conn
        async with self._lock:
            conn = self._conn
            if conn is None or conn.broken.done():
                conn = await self._connect()
            return conn

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn = _Connection(loop)
        ready: asyncio.Future[Any] = loop.create_future()
        conn.owner = asyncio.create_task(self._hold(conn, ready), name=f"mcp:{self.name}")
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                conn.client = await asyncio.shield(ready)
        except TimeoutError:
            await _end(conn)
            raise ToolUnavailable(
                f"MCP server {self.name}: no handshake within {self.config.connect_timeout_s:g} s"
            ) from None
        except ToolCallError:
            await _end(conn)
            raise
        self._conn = conn
        self.connects += 1
        return conn

    async def _hold(self, conn: _Connection, ready: asyncio.Future[Any]) -> None:
        from mcp import Client

        def on_message(message: Any) -> Any:
            return self._on_message(conn, message)

        try:
            async with Client(self._transport(), message_handler=on_message) as client:
                ready.set_result(client)
                await conn.stop.wait()
        except Exception as error:  # the connection's end, told to the callers
            if not ready.done():
                ready.set_exception(_unavailable(self.name, error))
            conn.fail(_unavailable(self.name, error))
        finally:
            conn.fail(ToolUnavailable(f"MCP server {self.name}: the connection closed"))
            if self._conn is conn:
                self._conn = None

    def _transport(self) -> Any:
        config = self.config
        if config.command is not None:
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            env = {name: os.environ.get(var, "") for name, var in config.env_from_env.items()}
            params = StdioServerParameters(
                command=config.command, args=list(config.args), env=env or None, cwd=config.cwd
            )
            return stdio_client(params)
        headers = {name: os.environ.get(var, "") for name, var in config.headers_from_env.items()}
        assert config.url is not None
        return _http_transport(config.url, headers)

    async def _on_message(self, conn: _Connection, message: Any) -> None:
        if isinstance(message, Exception):  # a line the transport could not read
            conn.fail(ToolProtocolError(f"MCP server {self.name} sent garbage: {message}"[:500]))

    async def call(
        self, tool: str, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> Any:
        """One ``tools/call``; the result's content as JSON, or a ``ToolCallError``."""
        conn = await self._connection()
        meta = {IDEMPOTENCY_META: idempotency_key} if idempotency_key else None
        call = asyncio.ensure_future(conn.client.call_tool(tool, dict(arguments), meta=meta))
        try:
            await asyncio.wait({call, conn.broken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
        if conn.broken.done() and (call.cancelled() or call.exception() is not None):
            raise conn.broken.result()
        try:
            result = call.result()
        except ValidationError as error:
            raise ToolProtocolError(_invalid(self.name, "tools/call", error)) from None
        except Exception as error:
            refused = _refused(self.name, tool, error)
            if refused is not None:  # the server answered with a JSON-RPC error: it is up
                raise refused from None
            failed = _unavailable(self.name, error)
            conn.fail(failed)  # a connection that failed a call is not trusted with the next
            raise failed from None
        return _content(self.name, tool, result)

    async def list_tools(self) -> list[Any]:
        conn = await self._connection()
        tools: list[Any] = []
        cursor = None
        for _ in range(100):  # pages, bounded: a server may not page forever
            try:
                page = await conn.client.list_tools(cursor=cursor)
            except ValidationError as error:
                raise ToolProtocolError(_invalid(self.name, "tools/list", error)) from None
            except Exception as error:
                failed = _unavailable(self.name, error)
                conn.fail(failed)
                raise failed from None
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await _end(conn)


async def _end(conn: _Connection) -> None:
    conn.stop.set()
    owner = conn.owner
    if owner is None:
        return
    try:
        async with asyncio.timeout(5):
            await asyncio.shield(owner)
    except (TimeoutError, Exception):
        owner.cancel()


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """The SDK's streamable-HTTP transport over a client with the configured headers,
    closed with it (the SDK leaves a client it was given open)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def _content(server: str, tool: str, result: Any) -> Any:
    """A tool's answer as JSON: its structured content, else its text, else the blocks."""
    blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True)
              for block in result.content]  # fmt: skip
    text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    if result.is_error:
        raise ToolFailed(f"{server}/{tool}: {text or 'the tool reported an error'}"[:2000])
    if result.structured_content is not None:
        return result.structured_content
    if all(b.get("type") == "text" for b in blocks):
        return text
    return blocks


def _invalid(server: str, method: str, error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "result"
    return f"MCP server {server} answered {method} with an invalid result ({where}: {first['msg']})"


def _refused(server: str, tool: str, error: Exception) -> ToolCallError | None:
    """A JSON-RPC error the server answered (not the SDK's own for a closed connection or
    a timeout) as the tool's failure; None for anything else."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    if not isinstance(error, MCPError) or error.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
        return None
    return ToolFailed(f"{server}/{tool}: the server refused the call ({error.code}): "
                      f"{error.message}"[:2000])  # fmt: skip


def _unavailable(server: str, error: BaseException) -> ToolCallError:
    if isinstance(error, ToolCallError):
        return error
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, OSError) and not str(error):
        error = OSError(type(error).__name__)
    return ToolUnavailable(f"MCP server {server}: {type(error).__name__}: {error}"[:500])
