"""A retry policy per agent (issue 38): exception types never retried or always retried, on
the class and in the YAML's agent settings, the most specific class deciding; names
checked when the file loads, the refused field named."""

from __future__ import annotations

import pytest

from deepagents import Task
from deepagents.config import FileConfig
from deepagents.config.load import parse_config
from deepagents.errors import ConfigError
from deepagents.testing import AgentHarness
from tests.retry_agents import RUNS, Lookup, Picky, Stubborn


def _config(settings: str) -> FileConfig:
    return parse_config(f"agents:\n  lookup:\n    settings: {settings}\n", source="t.yaml")


async def _failed_runs(agent: type[Lookup] | type[Stubborn], config: FileConfig) -> int:
    RUNS.clear()
    async with AgentHarness(agent, config=config, settings={"max_deliveries": 3}) as h:
        result = await h.run(Task(intent=agent.intents[0], payload={}), timeout=10)
    assert result.error is not None
    return RUNS[agent.name]


async def test_by_default_a_key_error_is_retried_to_max_deliveries() -> None:
    assert await _failed_runs(Lookup, FileConfig()) == 3


async def test_a_type_named_in_the_yaml_is_not_retried_bare_or_with_its_module() -> None:
    assert await _failed_runs(Lookup, _config("{non_retryable: [KeyError]}")) == 1
    assert await _failed_runs(Lookup, _config("{non_retryable: [builtins.LookupError]}")) == 1


async def test_the_class_declares_types_and_the_most_specific_rule_decides() -> None:
    assert await _failed_runs(Picky, FileConfig()) == 1  # LookupError on the class
    # KeyError, more specific than the class's LookupError, always retried by the YAML.
    yaml = "agents:\n  picky:\n    settings: {always_retry: [KeyError]}\n"
    assert await _failed_runs(Picky, parse_config(yaml)) == 3
    # A DeepAgentsError that is not retryable by default, always retried by the class.
    assert await _failed_runs(Stubborn, FileConfig()) == 3


@pytest.mark.parametrize(
    ("settings", "field", "reason"),
    [
        ('{non_retryable: ["not a name"]}', "non_retryable[0]", "should match pattern"),
        ("{always_retry: KeyError}", "always_retry", "valid tuple"),
        ("{non_retryable: [KeyError], always_retry: [KeyError]}", "", "also listed"),
        ("{nonretryable: [KeyError]}", "nonretryable", "Extra inputs"),
    ],
)
def test_a_bad_rule_is_refused_at_load_naming_the_field(
    settings: str, field: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _config(settings)
    message = str(refused.value)
    assert message.startswith(f"t.yaml: agents.lookup.settings{'.' * bool(field)}{field}: ")
    assert reason in message
    assert "\n" not in message
