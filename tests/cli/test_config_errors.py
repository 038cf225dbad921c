"""Issue 24 item 2 (a missing default config file is an error that says where it looked)
and issue 16 finding 8 (hostile config files and agent class paths are one line with the
file and the reason, never a traceback, a hang or a read until memory runs out)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.support import CONFIG, clean_env, deepagents, one_line_error

REDIS = os.environ.get("DEEPAGENTS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.mark.parametrize(
    "command", [("status",), ("publish", "--intent", "echo"), ("worker", "agents.echo:EchoAgent")]
)
def test_a_missing_default_config_says_where_it_looked(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    env = clean_env(DEEPAGENTS_REDIS_URL=REDIS)
    done = deepagents(*command, env=env, cwd=tmp_path, timeout=20)
    where = str(tmp_path / "config" / "deepagents.yaml")
    one_line_error(done, 2, where, "DEEPAGENTS_CONFIG")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deepagents.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_nesting_400_deep_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "agents: " + "[" * 400 + "]" * 400 + "\n")
    env = clean_env(DEEPAGENTS_REDIS_URL=REDIS, DEEPAGENTS_CONFIG=str(path))
    one_line_error(deepagents("status", env=env), 2, str(path), "nested deeper than 64")


def test_nesting_400_deep_in_block_style_is_one_line(tmp_path: Path) -> None:
    text = "".join(f"{'  ' * i}k{i}:\n" for i in range(400))
    path = _write(tmp_path, text)
    env = clean_env(DEEPAGENTS_REDIS_URL=REDIS, DEEPAGENTS_CONFIG=str(path))
    one_line_error(deepagents("status", env=env), 2, str(path), "nested deeper than 64")


def test_a_5000_digit_integer_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "defaults: {shards: " + "9" * 5000 + "}\n")
    env = clean_env(DEEPAGENTS_REDIS_URL=REDIS, DEEPAGENTS_CONFIG=str(path))
    one_line_error(deepagents("status", env=env), 2, str(path), "longer than 64 digits")


def test_dev_zero_is_refused_not_read(tmp_path: Path) -> None:
    env = clean_env(DEEPAGENTS_REDIS_URL=REDIS, DEEPAGENTS_CONFIG="/dev/zero")
    # the timeout guards the old behaviour: reading /dev/zero until memory runs out
    one_line_error(deepagents("status", env=env, timeout=30), 2, "/dev/zero", "not a regular file")


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    env = clean_env(DEEPAGENTS_REDIS_URL=REDIS, DEEPAGENTS_CONFIG=str(fifo))
    one_line_error(deepagents("status", env=env, timeout=30), 2, str(fifo), "not a regular file")


@pytest.mark.parametrize(
    ("class_path", "reason"),
    [
        ("os:system", "'system' is a builtin_function_or_method, not a class"),
        ("agents.echo:Nope", "no class 'Nope' in agents.echo"),
        ("agents.echo:Result", "Result is not an AgentContract subclass"),
        ("no_such_module_x:Agent", "cannot import 'no_such_module_x'"),
    ],
)
@pytest.mark.parametrize("command", ["gateway", "status"])
def test_a_bad_agent_class_in_the_file_is_one_line(
    tmp_path: Path, class_path: str, reason: str, command: str
) -> None:
    text = CONFIG.read_text(encoding="utf-8").replace("agents.echo:EchoAgent", class_path)
    path = _write(tmp_path, text)
    env = clean_env(DEEPAGENTS_REDIS_URL=REDIS, DEEPAGENTS_CONFIG=str(path))
    args = ("gateway", "--port", "1") if command == "gateway" else (command,)
    one_line_error(deepagents(*args, env=env), 2, str(path), "agents.echo.class", reason)


def test_a_bad_agent_class_on_the_worker_command_line_is_one_line() -> None:
    env = clean_env(DEEPAGENTS_REDIS_URL=REDIS, DEEPAGENTS_CONFIG=str(CONFIG))
    done = deepagents("worker", "agents.echo:Nope", env=env)
    one_line_error(done, 2, "no class 'Nope' in agents.echo")
