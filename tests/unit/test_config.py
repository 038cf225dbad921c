"""The config loader: a bad file fails at start with the file, the field and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepagents.config import load_config, load_settings, parse_config
from deepagents.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_shipped_config_loads() -> None:
    config = load_config(REPO / "config" / "deepagents.yaml")
    assert config.tier_names == ("p0", "p1", "p2")
    assert config.agent_settings("research").shards == 2
    assert config.agent_settings("risk").shards == 4


def test_a_path_may_be_a_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    config = load_config("config/deepagents.yaml")
    assert config.agent_settings("risk").shards == 4
    assert config == load_config(REPO / "config" / "deepagents.yaml")
    with pytest.raises(ConfigError, match=r"missing\.yaml: file not found"):
        load_config("config/missing.yaml")


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ("tiers: {p0: {concurrency: 0}}", "tiers.p0.concurrency", "greater than or equal to 1"),
        ("tiers: {p0: {concurrency: high}}", "tiers.p0.concurrency", "valid integer"),
        ("defaults: {shards: 0}", "defaults.shards", "greater than or equal to 1"),
        (
            "defaults: {retry: {base_ms: 500, max_ms: 10}}",
            "defaults.retry",
            "max_ms must be >= base_ms",
        ),
        ("agents: {risk: {klass: x}}", "agents.risk.klass", "Extra inputs"),
        ("agents: {risk: {class: nocolon}}", "agents.risk.class", "module.path:ClassName"),
        ("agents: {'a{b}': {}}", "agents", "becomes a Redis key"),
        ("agents: {risk: {settings: {shards: -1}}}", "", "agents.risk.settings"),
        ("strategies: [{name: a, match: {intent: x}, tier: p9}]", "", "unknown tier 'p9'"),
        (
            "strategies: [{name: a, match: {payload.x: {regex: '(a+)+$'}}, tier: p0}]",
            "strategies[0].match",
            "unknown operator 'regex'",
        ),
        (
            "strategies: [{name: a, match: {__class__: 1}, tier: p0}]",
            "strategies[0].match",
            "a path is",
        ),
        (
            "strategies: [{name: a, match: {intent: \"__import__('os').system('x')\"}, tier: p0},"
            " {name: a, match: {intent: y}, tier: p0}]",
            "",
            "duplicate strategy names",
        ),
        (
            "tiers: {p2: {concurrency: 5, fair_share: {max_running_per_key: 0}}}",
            "tiers.p2.fair_share.max_running_per_key",
            "greater than or equal to 1",
        ),
        (
            "tiers: {p2: {concurrency: 5, fair_share: {max_running: 2}}}",
            "tiers.p2.fair_share.max_running",
            "Extra inputs",
        ),
        ("surprise: 1", "surprise", "Extra inputs"),
        ("- a\n- b", "", "top level must be a mapping"),
    ],
)
def test_bad_config_names_file_field_reason(text: str, field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="bad.yaml")
    message = str(info.value)
    assert message.startswith("bad.yaml: ")
    assert field in message
    assert reason in message


@pytest.mark.parametrize(
    "text",
    [
        "x: !!python/object/apply:os.system ['touch /tmp/deepagents-pwned']",
        "x: !!python/name:os.system",
        "a: &a [1, 2]\nb: [*a, *a]",
        "tiers: {p0: {concurrency: 1}}\ntiers: {p0: {concurrency: 2}}",
        "key: [unclosed",
    ],
)
def test_hostile_yaml_is_rejected_and_nothing_runs(text: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_config(text, source="evil.yaml")
    assert not Path("/tmp/deepagents-pwned").exists()


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)


def test_bad_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPAGENTS_PREFIX", "has space")
    with pytest.raises(ConfigError, match="DEEPAGENTS_PREFIX"):
        load_settings()


def test_fair_share_is_a_flag_or_its_options() -> None:
    tiers = parse_config(
        "tiers: {p0: {concurrency: 1}, p1: {concurrency: 1, fair_share: true},"
        " p2: {concurrency: 1, fair_share: {max_running_per_key: 3}}}",
        source="x.yaml",
    ).tiers
    assert tiers["p0"].fair_share is None and tiers["p0"].max_running_per_key == 0
    assert tiers["p1"].fair_share is not None and tiers["p1"].max_running_per_key == 0
    assert tiers["p2"].max_running_per_key == 3
