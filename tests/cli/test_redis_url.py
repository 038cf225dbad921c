"""Issue 24 item 1: a malformed or unreachable DEEPAGENTS_REDIS_URL is one line in every
command, the demo included (checked before it starts PostgreSQL or the simulator)."""

from __future__ import annotations

import pytest

from tests.cli.support import CONFIG, clean_env, deepagents, one_line_error

COMMANDS = [
    ("status",),
    ("publish", "--intent", "echo", "--payload", "{}"),
    ("dlq", "list"),
    ("worker", "agents.echo:EchoAgent"),
    ("gateway", "--port", "1"),
    ("demo", "--no-audit"),  # with the simulator: the check must come before it
    ("reply", "some-task", "--answer", "{}"),
    ("tasks", "waiting"),
]
IDS = [c[0] for c in COMMANDS]


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_malformed_url_is_one_line(command: tuple[str, ...]) -> None:
    env = clean_env(DEEPAGENTS_REDIS_URL="127.0.0.1:6379", DEEPAGENTS_CONFIG=str(CONFIG))
    one_line_error(deepagents(*command, env=env), 2, "DEEPAGENTS_REDIS_URL", "(got no scheme)")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("notaurl", "got no scheme"),
        ("http://127.0.0.1:6379/0", "got scheme 'http'"),
        ("redis://", "names no host"),
        ("redis://127.0.0.1:port/0", "is not a valid URL"),
    ],
)
def test_each_malformed_url_says_why(url: str, reason: str) -> None:
    env = clean_env(DEEPAGENTS_REDIS_URL=url, DEEPAGENTS_CONFIG=str(CONFIG))
    one_line_error(deepagents("status", env=env), 2, "DEEPAGENTS_REDIS_URL", reason)


def test_a_password_in_a_bad_url_is_not_printed() -> None:
    url = "http://:hunter2@127.0.0.1/0"
    env = clean_env(DEEPAGENTS_REDIS_URL=url, DEEPAGENTS_CONFIG=str(CONFIG))
    line = one_line_error(deepagents("status", env=env), 2, "scheme 'http'")
    assert "hunter2" not in line


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_an_unreachable_redis_is_one_line(command: tuple[str, ...]) -> None:
    env = clean_env(DEEPAGENTS_REDIS_URL="redis://127.0.0.1:1/0", DEEPAGENTS_CONFIG=str(CONFIG))
    done = deepagents(*command, env=env)
    one_line_error(done, 1, "cannot reach Redis", "127.0.0.1:1")
    # the demo refuses before it starts anything: it printed nothing else
    assert "PostgreSQL" not in done.stdout and "SIMULATOR" not in done.stdout
