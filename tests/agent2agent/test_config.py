"""A2A's configuration refused in one line: an A2A remote agent needs an http(s) URL; the
gateway's default A2A agent must be an agent type of the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepagents.config import Settings, load_config
from deepagents.errors import ConfigError
from deepagents.gateway.app import create_app
from tests.remote.conftest import remote_config
from tests.remote.test_config import worker_error


def test_an_a2a_remote_agent_needs_an_http_url(tmp_path: Path, redis_url: str) -> None:
    config = remote_config("grpc://127.0.0.1:9", protocol="a2a")
    line = worker_error(tmp_path, redis_url, config, "--remote", "risk-node")
    assert "protocol a2a needs an http(s):// url" in line, line


def test_the_default_a2a_agent_must_be_an_agent_type(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    text = remote_config("http://127.0.0.1:9")
    path.write_text(text + "gateway:\n  a2a: {enabled: true, default_agent: nobody}\n")
    with pytest.raises(ConfigError, match="default_agent: no agent type 'nobody'"):
        create_app(Settings(redis_url="redis://127.0.0.1:1/0"), load_config(path))
