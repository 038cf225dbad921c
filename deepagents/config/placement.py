"""Placement: which tiers and shards of an agent type one worker reads.

An SRE runs a dedicated pool for urgent work (``--tiers p0``) or a worker per shard
(``--shards 3``); by default a worker reads every tier of every shard. The registry records
each live instance's placement, so ``deepagents status`` and the exporter can name a stream
no live worker reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepagents.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Placement:
    """Tiers in the configuration's priority order, shards ascending; never empty."""

    tiers: tuple[str, ...]
    shards: tuple[int, ...]

    @classmethod
    def everything(cls, tiers: Sequence[str], shards: int) -> Placement:
        return cls(tuple(tiers), tuple(range(shards)))

    def reads(self, tier: str, shard: int) -> bool:
        return tier in self.tiers and shard in self.shards

    def as_json(self) -> dict[str, list[str] | list[int]]:
        return {"tiers": list(self.tiers), "shards": list(self.shards)}


def parse_placement(tiers: str, shards: str, tier_names: Sequence[str], count: int) -> Placement:
    """``--tiers p0,p1`` and ``--shards 0,2-3`` (empty: all), checked against the
    configuration: an unknown tier or a shard out of range is one ``ConfigError`` line."""
    return Placement(_tiers(tiers, tier_names), _shards(shards, count))


def check_placement(placement: Placement, tier_names: Sequence[str], count: int) -> None:
    """A placement built in code holds to what ``parse_placement`` checks: a worker must
    never read a stream no one writes (a tier not configured, a shard past the count)."""
    tiers = ",".join(placement.tiers) or "(none)"
    shards = ",".join(map(str, placement.shards)) or "(none)"
    parse_placement(tiers, shards, tier_names, count)


def _tiers(text: str, names: Sequence[str]) -> tuple[str, ...]:
    asked = [p.strip() for p in text.split(",") if p.strip()]
    if not asked:
        return tuple(names)
    unknown = [t for t in asked if t not in names]
    if unknown:
        raise ConfigError(
            f"--tiers: unknown tier {unknown[0]!r}; the configured tiers are {', '.join(names)}"
        )
    return tuple(t for t in names if t in asked)  # priority order, each once


def _shards(text: str, count: int) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        return tuple(range(count))
    chosen: set[int] = set()
    for part in parts:
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ConfigError(f"--shards: {part!r} must be N or N-M (e.g. 0,2-3)")
        first, last = int(low), int(high) if sep else int(low)
        if first > last or last >= count:
            raise ConfigError(
                f"--shards: {part!r} is out of range; this agent has {count} shards (0-{count - 1})"
            )
        chosen.update(range(first, last + 1))
    return tuple(sorted(chosen))
