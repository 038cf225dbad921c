"""MCP servers in an agent's YAML: checked at load, the field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepagents.config import load_config
from deepagents.config.schema import FileConfig
from deepagents.errors import ConfigError

BASE = """
agents:
  a:
    class: "tests.tools.agents:ToolsAgent"
    mcp_servers:
{servers}
"""


def _load(tmp_path: Path, servers: str) -> FileConfig:
    path = tmp_path / "c.yaml"
    path.write_text(BASE.format(servers=servers))
    return load_config(path)


def test_stdio_and_http_servers_load(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        """      files: {command: "mcp-files", args: ["--root", "/srv"]}
      search:
        url: "https://search.example/mcp"
        headers_from_env: {Authorization: SEARCH_TOKEN}
        default: {read_only: true, timeout_s: 5}
        tools: {reindex: {destructive: true}}""",
    )
    servers = config.agents["a"].mcp_servers
    assert servers["files"].command == "mcp-files" and servers["files"].args == ("--root", "/srv")
    assert servers["search"].default.read_only and servers["search"].tools["reindex"].destructive


@pytest.mark.parametrize(
    ("servers", "named"),
    [
        ('      x: {command: "a", url: "http://h/mcp"}', "mcp_servers.x"),
        ("      x: {}", "mcp_servers.x"),
        ('      x: {url: "ftp://h"}', "mcp_servers.x.url"),
        ('      x: {command: "a", colour: red}', "mcp_servers.x.colour"),
        ('      x: {command: "a", tools: {t: {read_only: true, destructive: true}}}', "tools.t"),
        ('      x: {command: "a", default: {timeout_s: 0}}', "default.timeout_s"),
    ],
)
def test_bad_servers_are_refused_with_the_field_named(
    tmp_path: Path, servers: str, named: str
) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        _load(tmp_path, servers)
