"""Placement (``--tiers``, ``--shards``) parsing, and the coverage a fleet's placements
leave: which tiers, shards and streams no live worker reads."""

from __future__ import annotations

import re

import pytest

from agents.echo import EchoAgent
from deepagents.config import parse_config
from deepagents.config.placement import Placement, parse_placement
from deepagents.errors import ConfigError
from deepagents.orchestrator.coverage import coverage
from deepagents.store.memory_registry import MemoryRegistry

TIERS = ("p0", "p1", "p2")


def test_empty_flags_read_everything() -> None:
    assert parse_placement("", "", TIERS, 3) == Placement(TIERS, (0, 1, 2))


def test_tiers_keep_priority_order_and_shards_take_ranges() -> None:
    placed = parse_placement("p2, p0,p2", "3,0-1", TIERS, 4)
    assert placed == Placement(("p0", "p2"), (0, 1, 3))
    assert placed.reads("p0", 3) and not placed.reads("p1", 0) and not placed.reads("p0", 2)


@pytest.mark.parametrize(
    ("tiers", "shards", "said"),
    [
        ("p3", "", "--tiers: unknown tier 'p3'; the configured tiers are p0, p1, p2"),
        ("", "4", "--shards: '4' is out of range; this agent has 4 shards (0-3)"),
        ("", "2-9", "--shards: '2-9' is out of range"),
        ("", "3-1", "--shards: '3-1' is out of range"),
        ("", "-1", "--shards: '-1' must be N or N-M"),
        ("", "a", "--shards: 'a' must be N or N-M"),
    ],
)
def test_a_bad_placement_says_what_is_wrong(tiers: str, shards: str, said: str) -> None:
    with pytest.raises(ConfigError, match="^" + said.replace("(", r"\(").replace(")", r"\)")):
        parse_placement(tiers, shards, TIERS, 4)


CONFIG = parse_config(
    """
defaults: {shards: 3}
agents:
  echo: {class: "agents.echo:EchoAgent"}
"""
)


async def test_coverage_names_unread_tiers_shards_and_streams() -> None:
    registry = MemoryRegistry()
    agent = EchoAgent()
    await registry.register(agent, "urgent")
    await registry.record_reads("echo", "urgent", Placement(("p0",), (0, 1, 2)))
    await registry.register(agent, "shard0")
    await registry.record_reads("echo", "shard0", Placement(TIERS, (0,)))
    await registry.register(agent, "p1-on-1")
    await registry.record_reads("echo", "p1-on-1", Placement(("p1",), (1,)))
    covered = await coverage(registry, CONFIG, "echo")
    assert covered.instances == 3
    assert covered.readers[("p0", 0)] == 2 and covered.readers[("p2", 2)] == 0
    assert covered.unread_tiers() == [] and covered.unread_shards() == []
    assert covered.summary() == [
        "echo: p1 on shard 2",
        "echo: p2 on shard 1",
        "echo: p2 on shard 2",
    ]
    await registry.deregister(agent, "urgent")
    covered = await coverage(registry, CONFIG, "echo")
    assert covered.unread_tiers() == [] and covered.unread_shards() == [2]
    assert covered.summary() == [
        "echo: shard 2 (every tier)",
        "echo: p0 on shard 1",
        "echo: p2 on shard 1",
    ]


async def test_an_instance_that_recorded_nothing_reads_everything() -> None:
    """A worker from before placement registers without a reads record."""
    registry = MemoryRegistry()
    await registry.register(EchoAgent(), "old")
    covered = await coverage(registry, CONFIG, "echo")
    assert covered.unread() == [] and covered.instances == 1


async def test_no_live_worker_leaves_everything_unread() -> None:
    covered = await coverage(MemoryRegistry(), CONFIG, "echo")
    assert covered.unread_tiers() == list(TIERS) and covered.unread_shards() == [0, 1, 2]
    assert covered.summary()[0] == "echo: tier p0 (every shard)"


def test_a_worker_refuses_a_placement_outside_its_configuration() -> None:
    from deepagents.compose import memory_services
    from deepagents.config import Settings
    from deepagents.worker import Assignment, Worker

    settings = Settings()
    for placement, said in (
        (Placement(("p0",), (3,)), "'3' is out of range; this agent has 3 shards"),
        (Placement(("p5",), (0,)), "unknown tier 'p5'"),
        (Placement((), (0,)), "unknown tier '(none)'"),
    ):
        with pytest.raises(ConfigError, match=re.escape(said)):
            Worker(
                EchoAgent(),
                services=memory_services(settings),
                config=CONFIG,
                settings=settings,
                assignment=Assignment(placement),
            )
