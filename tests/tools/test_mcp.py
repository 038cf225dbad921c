"""MCP servers' tools against real servers written with the ``mcp`` SDK, over stdio and over
streamable HTTP: listed, called, results returned; killed mid-call (a clear error, and a
retry when the tool's policy allows one); garbage (a clear error, never a traceback)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from deepagents.config.schema import McpServerConfig
from deepagents.contract.toolcalls import ToolCall, ToolResult
from deepagents.tools import ToolProtocolError, ToolUnavailable, wrap_tool_call
from deepagents.tools.mcp import McpServers, McpTool
from tests.support.wait import eventually
from tests.tools.conftest import HttpServer, garbage_config, stdio_config

EXPECTED = {"add", "record", "slow", "broken", "refuse"}


@pytest.fixture
async def pool() -> AsyncIterator[list[McpServers]]:
    made: list[McpServers] = []
    yield made
    for servers in made:
        await servers.aclose()


def _servers(pool: list[McpServers], **configs: McpServerConfig) -> McpServers:
    servers = McpServers(configs)
    pool.append(servers)
    return servers


def _lines(effects: Path) -> list[list[str]]:
    return [line.split() for line in effects.read_text().splitlines()] if effects.exists() else []


async def _tool(servers: McpServers, server: str, name: str) -> McpTool:
    return next(t for t in await servers.tools(server) if t.name == name)


async def _call(tool: McpTool, **arguments: object) -> ToolResult:
    return await wrap_tool_call(tool, ToolCall("c1", tool.name, arguments), agent="test")


async def _lists_and_calls(servers: McpServers, server: str, effects: Path) -> None:
    tools = {t.name: t for t in await servers.tools(server)}
    assert set(tools) == EXPECTED
    add = tools["add"].definition
    assert add.parameters["required"] == ["a", "b"]
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.description == "Add two integers."

    assert (await _call(tools["add"], a=2, b=40)) == ToolResult("c1", "add", {"result": 42})
    recorded = await _call(tools["record"], text="hello")
    assert recorded.content == {"result": "recorded hello"} and not recorded.is_error
    assert [line[1:] for line in _lines(effects)] == [["record", "hello", "-"]]
    # The idempotency key travels in the request's _meta.
    await servers.session(server).call("record", {"text": "again"}, idempotency_key="t/k#2")
    assert _lines(effects)[-1][1:] == ["record", "again", "t/k#2"]
    # The tool's own failure: an error result the model reads.
    broken = await _call(tools["broken"], reason="on purpose")
    assert broken.is_error and broken.content["error"] == "tool_error"
    assert "broken: on purpose" in broken.content["message"]
    # A JSON-RPC error: the tool's failure; the server is up, the session kept.
    refused = await _call(tools["refuse"], reason="no")
    assert refused.is_error and refused.content["error"] == "tool_error"
    assert "the server refused the call (-32602): refused: no" in refused.content["message"]
    # Arguments the schema refuses never reach the server.
    bad = await _call(tools["record"], text=7)
    assert bad.is_error and bad.content["error"] == "tool_invalid_arguments"
    assert len(_lines(effects)) == 2
    assert servers.session(server).connects == 1  # one pooled session for all of it


async def test_stdio_server_tools_are_listed_and_called(
    pool: list[McpServers], effects: Path
) -> None:
    servers = _servers(pool, local=stdio_config(effects))
    await _lists_and_calls(servers, "local", effects)


async def test_streamable_http_server_tools_are_listed_and_called(
    pool: list[McpServers], effects: Path, http_server: HttpServer
) -> None:
    servers = _servers(pool, remote=http_server.config())
    await _lists_and_calls(servers, "remote", effects)


def _slow_policy(idempotent: bool) -> dict[str, object]:
    return {"tools": {"slow": {"idempotent": idempotent, "retries": 1, "timeout_s": 60}}}


async def _started(effects: Path, n: int) -> list[str]:
    async def ready() -> list[str]:
        starts = [line for line in _lines(effects) if line[1] == "slow-start"]
        return starts[n - 1] if len(starts) >= n else []

    return await eventually(ready, timeout=30, what=f"slow call #{n} running on the server")


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
async def test_stdio_server_killed_mid_call(
    pool: list[McpServers], effects: Path, tmp_path: Path, idempotent: bool
) -> None:
    gate = tmp_path / "gate"
    servers = _servers(pool, local=stdio_config(effects, **_slow_policy(idempotent)))
    slow = await _tool(servers, "local", "slow")
    call = asyncio.ensure_future(_call(slow, gate=str(gate), label="x"))
    first = await _started(effects, 1)
    os.kill(int(first[0]), signal.SIGKILL)
    if idempotent:  # retried on a new session: a new server process
        second = await _started(effects, 2)
        assert second[0] != first[0]
        gate.touch()
        result = await call
        assert result == ToolResult("c1", "slow", {"result": "passed x"})
        assert servers.session("local").connects == 2
    else:  # at most once: the error, and no second run
        result = await call
        assert result.is_error and result.content["error"] == "tool_unavailable"
        assert "MCP server local" in result.content["message"]
        assert [line[1] for line in _lines(effects)] == ["slow-start"]
        # The pool reconnects on the next call.
        assert (await _call(await _tool(servers, "local", "add"), a=1, b=1)).content == {
            "result": 2
        }


async def test_http_server_killed_mid_call_is_retried_when_idempotent(
    pool: list[McpServers], effects: Path, tmp_path: Path, http_server: HttpServer
) -> None:
    gate = tmp_path / "gate"
    servers = _servers(pool, remote=http_server.config(**_slow_policy(True)))
    slow = await _tool(servers, "remote", "slow")
    call = asyncio.ensure_future(_call(slow, gate=str(gate), label="h"))
    first = await _started(effects, 1)
    # Killed and started again on the same port; the loop is blocked meanwhile (start()
    # waits for the port synchronously), so the client sees the break with the new server
    # already up: the retry's reconnect finds it, whatever the machine's speed.
    http_server.kill()
    http_server.start()
    await _started(effects, 2)
    gate.touch()
    assert (await call) == ToolResult("c1", "slow", {"result": "passed h"})
    pids = {line[0] for line in _lines(effects) if line[1] == "slow-start"}
    assert len(pids) == 2 and first[0] in pids


async def test_http_server_killed_mid_call_is_a_clear_error_when_not_retryable(
    pool: list[McpServers], effects: Path, tmp_path: Path, http_server: HttpServer
) -> None:
    servers = _servers(pool, remote=http_server.config(**_slow_policy(False)))
    slow = await _tool(servers, "remote", "slow")
    call = asyncio.ensure_future(_call(slow, gate=str(tmp_path / "gate"), label="h"))
    await _started(effects, 1)
    http_server.kill()
    result = await call
    assert result.is_error and result.content["error"] == "tool_unavailable"
    assert result.content["message"].startswith("MCP server remote:")


async def test_garbage_schema_is_a_clear_error(
    pool: list[McpServers], caplog: pytest.LogCaptureFixture
) -> None:
    servers = _servers(pool, bad=garbage_config("schema"))
    with pytest.raises(ToolProtocolError, match=r"the input schema of bad/echo is invalid"):
        await servers.tools("bad")


@pytest.mark.parametrize("mode", ["result", "noise"])
async def test_garbage_answers_are_a_clear_error_not_a_traceback(
    pool: list[McpServers], caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.DEBUG)
    servers = _servers(pool, bad=garbage_config(mode))
    echo = await _tool(servers, "bad", "echo")
    result = await _call(echo)
    assert result.is_error and result.content["error"] == "tool_protocol_error", result
    assert "MCP server bad" in result.content["message"]
    assert "Traceback" not in caplog.text
    assert all(r.exc_info is None for r in caplog.records)


async def test_a_missing_server_is_a_clear_error(pool: list[McpServers], tmp_path: Path) -> None:
    servers = _servers(pool, gone=McpServerConfig(command=str(tmp_path / "no-such-server")))
    with pytest.raises(ToolUnavailable, match=r"^MCP server gone: "):
        await servers.tools("gone")
    with pytest.raises(ToolUnavailable, match=r"no MCP server named 'other'.*known: gone"):
        await servers.tools("other")


async def test_concurrent_calls_share_one_pooled_session(
    pool: list[McpServers], effects: Path
) -> None:
    servers = _servers(pool, local=stdio_config(effects))
    tools = await asyncio.gather(*(servers.tools("local") for _ in range(5)))
    add = next(t for t in tools[0] if t.name == "add")
    results = await asyncio.gather(*(_call(add, a=i, b=i) for i in range(20)))
    assert [r.content for r in results] == [{"result": 2 * i} for i in range(20)]
    assert servers.session("local").connects == 1
