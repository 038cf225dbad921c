"""The ``middleware:`` list of an agent in the YAML file: built-ins by name with their
settings, refused at load with the field named (unknown names, bad settings, an order the
chain cannot honour); and a worker process refuses to start on such a file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deepagents.agentkit import Approval, ContextBudget, Guardrail, LoopDetection
from deepagents.agentkit.configured import agent_chain
from deepagents.config import parse_config
from deepagents.errors import ConfigError

AGENT = "agents:\n  shop:\n    class: 'tests.agentkit.agents:ToolAgent'\n    middleware:\n"
MODELS = "models:\n  small: {base_url: 'http://127.0.0.1:1/v1'}\n"


def _middleware(*lines: str) -> str:
    return AGENT + "".join(f"      - {line}\n" for line in lines) + MODELS


def test_built_ins_by_name_with_their_settings() -> None:
    config = parse_config(
        _middleware(
            "{name: approval, tools: ['refund*']}",
            "{name: guardrail, deny: [{tool: wipe, arguments: {target: 'prod*'}}]}",
            "{name: loop_detection, repeats: 4}",
            "{name: context_budget, strategy: summarise, model: small}",
        )
    )
    chain = agent_chain(object(), "shop", config).chain
    assert chain is not None
    kinds = [type(m) for m in chain.middleware]
    assert kinds == [Approval, Guardrail, LoopDetection, ContextBudget]
    loops = chain.middleware[2]
    assert isinstance(loops, LoopDetection) and (loops.repeats, loops.window) == (4, 20)


def test_an_agent_without_middleware_has_no_chain() -> None:
    """Nothing in the YAML or the class: no chain is built (its modules stay unloaded on
    the worker's start), and the tool loop runs the call's own middleware only."""
    config = parse_config("agents:\n  shop: {class: 'tests.agentkit.agents:ToolAgent'}\n")
    assert agent_chain(object(), "shop", config).chain is None
    assert agent_chain(object(), "shop", None).chain is None


@pytest.mark.parametrize(
    ("lines", "field", "words"),
    [
        (["{name: retry_forever}"], "agents.shop.middleware[0]", "does not match"),
        (
            ["{name: loop_detection, repeats: 1}"],
            "middleware[0].loop_detection.repeats",
            "greater than or equal to 2",
        ),
        (["{name: loop_detection, repeats: 30}"], "middleware[0].loop_detection", "<= window"),
        (
            ["{name: limits}"],
            "agents.shop.middleware[0].limits",
            "model_calls, tool_calls, cost_usd or tokens",
        ),
        (["{name: guardrail, on_deny: shrug}"], "middleware[0].guardrail.on_deny", "tell_model"),
        (["{name: guardrail, policy: 'not a path'}"], "middleware[0].guardrail.policy", "match"),
        (["{name: pii_redaction, kinds: [shoe_size]}"], "pii_redaction.kinds[0]", "email"),
        (["{name: context_budget, strategy: summarise}"], "context_budget", "needs model"),
        # an order the chain cannot honour, and a built-in twice
        (
            ["{name: guardrail, deny: [{tool: wipe}]}", "{name: approval}"],
            "agents.shop.middleware",
            "middleware[1]: approval must come before guardrail",
        ),
        (
            ["{name: pii_redaction}", "{name: context_budget, strategy: truncate}"],
            "agents.shop.middleware",
            "middleware[1]: context_budget must come before pii_redaction",
        ),
        (
            ["{name: limits, tool_calls: 3}", "{name: limits, model_calls: 3}"],
            "agents.shop.middleware",
            "limits appears twice",
        ),
    ],
)
def test_refused_at_load_with_the_field_named(lines: list[str], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_middleware(*lines))
    assert caught.value.field is not None and caught.value.field.endswith(field)
    assert words in caught.value.reason


def test_a_summary_model_must_be_configured() -> None:
    with pytest.raises(ConfigError, match=r"agents.shop.middleware\[0\].model: unknown model"):
        parse_config(_middleware("{name: context_budget, strategy: summarise, model: big}"))


def test_a_worker_refuses_to_start_on_an_order_it_cannot_honour(tmp_path: Path) -> None:
    path = tmp_path / "deepagents.yaml"
    path.write_text(_middleware("{name: guardrail, deny: [{tool: wipe}]}", "{name: approval}"))
    env = {"DEEPAGENTS_CONFIG": str(path), "DEEPAGENTS_REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run(
        [sys.executable, "-m", "deepagents", "worker", "tests.agentkit.agents:ToolAgent"],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one clear line, no traceback
    assert "agents.shop.middleware" in lines[0] and "approval must come before" in lines[0]
