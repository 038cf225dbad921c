"""Bad remote-agent configuration and arguments: one clear line each, exit status 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.e2e.conftest import worker_procs
from tests.remote.conftest import remote_config


def worker_error(tmp_path: Path, redis_url: str, config: str, *args: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    procs = worker_procs(redis_url, "da-test-unused", path)
    try:
        run = procs.run("worker", *args)
    finally:
        procs.close()
    assert run.returncode == 2, run.stdout + run.stderr
    (line,) = run.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "give either MODULE:CLASS or --remote NAME"),
        (("agents.echo:EchoAgent", "--remote", "risk-node"), "give either"),
        (("--remote", "nope"), "--remote nope: no agents.nope.remote in the config"),
    ],
)
def test_a_worker_needs_exactly_one_known_agent(
    tmp_path: Path, redis_url: str, args: tuple[str, ...], says: str
) -> None:
    line = worker_error(tmp_path, redis_url, remote_config("http://127.0.0.1:9"), *args)
    assert says in line, line


@pytest.mark.parametrize(
    ("remote", "says"),
    [
        ({"url": '"file:///etc/passwd"'}, "agents.risk-node.remote.url"),
        ({"url": '"http://127.0.0.1:9"', "timeout_s": 0}, "timeout_s"),
        ({"url": '"http://127.0.0.1:9"', "headers_from_env": "{authorization: NO_SUCH_VAR}"},
         "header authorization needs $NO_SUCH_VAR"),
        ({"mode": "pull", "url": '"http://127.0.0.1:9"'},
         "pull mode takes a pull section (listen, token_from_env), no url"),
        ({"mode": "pull", "pull": '{listen: "127.0.0.1:0", token_from_env: NO_SUCH_VAR}'},
         "pull mode needs its token in $NO_SUCH_VAR"),
    ],
)  # fmt: skip
def test_a_bad_remote_section_is_one_line(
    tmp_path: Path, redis_url: str, remote: dict[str, object], says: str
) -> None:
    options = ", ".join(f"{k}: {v}" for k, v in remote.items())
    config = remote_config("x").replace('{url: "x"}', "{" + options + "}")
    line = worker_error(tmp_path, redis_url, config, "--remote", "risk-node")
    assert says in line, line


def test_a_pull_mode_address_taken_is_one_line(tmp_path: Path, redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        pull = f'{{listen: "127.0.0.1:{port}", token_from_env: PULL_TOKEN_SET}}'
        config = remote_config("x").replace('{url: "x"}', f"{{mode: pull, pull: {pull}}}")
        path = tmp_path / "config.yaml"
        path.write_text(config)
        procs = worker_procs(redis_url, "da-test-unused", path, PULL_TOKEN_SET="t" * 16)
        try:
            run = procs.run("worker", "--remote", "risk-node")
        finally:
            procs.close()
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"pull mode: cannot listen on 127.0.0.1:{port}" in run.stderr.strip().splitlines()[-1]
