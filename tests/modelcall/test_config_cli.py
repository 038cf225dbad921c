"""The ``models:`` section of the YAML file and the ``deepagents sim-model`` command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from deepagents.config.load import load_config, parse_config
from deepagents.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_models_section_parses() -> None:
    config = parse_config(
        "models:\n"
        "  main: {base_url: 'http://127.0.0.1:1/v1', fallbacks: [cheap], limits: {tpm: 1000}}\n"
        "  cheap: {base_url: 'http://127.0.0.1:1/v1', price_in_per_1k: 0.1}\n"
    )
    assert config.models["main"].fallbacks == ("cheap",)
    assert config.models["main"].limits.tpm == 1000
    assert config.models["main"].max_tokens == 2048  # the default cap
    assert config.models["main"].timeouts.total_s == 30.0


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("models:\n  a: {base_url: 'http://x/v1', fallbacks: [nope]}\n", "models"),
        ("models:\n  'A B': {base_url: 'http://x/v1'}\n", "models"),
        ("models:\n  a: {base_url: 'http://x/v1', api_key: 'sk-inline'}\n", "models.a.api_key"),
        (
            "models:\n  a: {base_url: 'http://x/v1', retry: {max_retries: 99}}\n",
            "models.a.retry.max_retries",
        ),
    ],
)
def test_bad_models_section(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert caught.value.field == field


def test_the_shipped_config_has_a_valid_models_section() -> None:
    config = load_config(ROOT / "config" / "deepagents.yaml")
    assert "research" in config.models


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "deepagents", "sim-model", *args]


def test_sim_model_command_serves_on_loopback() -> None:
    proc = subprocess.Popen(
        _cli("--port", "0", "--burst", "503:1"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"SIMULATOR .* (http://127\.0\.0\.1:\d+/v1)", line)
        assert match, line
        url = match.group(1)
        body = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(timeout=10) as http:
            assert http.post(f"{url}/chat/completions", json=body).status_code == 503
            answer = http.post(f"{url}/chat/completions", json=body).json()
            assert answer["choices"][0]["message"]["content"]
            assert http.get(url.removesuffix("/v1") + "/sim/stats").json()["requests"] == 2
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def test_the_simulator_process_speaks_tools_anthropic_and_embeddings() -> None:
    proc = subprocess.Popen(
        _cli("--port", "0", "--context-tokens", "60", "--embedding-dims", "4"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", proc.stdout.readline())
        assert match
        url = match.group(1)
        ask = {"role": "user", "content": 'sim: call lookup {"q": "x"}'}
        with httpx.Client(timeout=10) as http:
            chat = http.post(f"{url}/chat/completions", json={"messages": [ask]}).json()
            (call,) = chat["choices"][0]["message"]["tool_calls"]
            assert call["function"] == {"name": "lookup", "arguments": '{"q": "x"}'}
            claude = http.post(
                f"{url}/messages", json={"model": "c", "max_tokens": 9, "messages": [ask]}
            ).json()
            assert claude["stop_reason"] == "tool_use"
            assert claude["content"][0]["input"] == {"q": "x"}
            vectors = http.post(f"{url}/embeddings", json={"input": ["a", "b"]}).json()
            assert [len(item["embedding"]) for item in vectors["data"]] == [4, 4]
            long = {"messages": [{"role": "user", "content": "word " * 100}]}
            refused = http.post(f"{url}/chat/completions", json=long)
            assert refused.status_code == 400
            assert refused.json()["error"]["code"] == "context_length_exceeded"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


@pytest.mark.parametrize(
    "args",
    [
        ["--error-rate", "1.5"],
        ["--burst", "200:1"],
        ["--burst", "oops"],
        ["--port", "70000"],
        ["--context-tokens", "0"],
        ["--embedding-dims", "0"],
    ],
)
def test_sim_model_bad_arguments(args: list[str]) -> None:
    done = subprocess.run(_cli(*args), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deepagents: error:"), done.stderr
