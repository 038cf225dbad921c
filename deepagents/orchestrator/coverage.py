"""Which streams live workers read: per (agent, tier, shard), how many live instances read
it. A stream no one reads holds its tasks for ever (and its shard's delayed set is promoted
by no one), so ``deepagents status`` names it and the exporter's
``deepagents_stream_readers`` gauge lets an alert rule fire on it."""

from __future__ import annotations

from dataclasses import dataclass

from deepagents.config.placement import Placement
from deepagents.config.schema import FileConfig
from deepagents.store.base import Registry


@dataclass(frozen=True, slots=True)
class Coverage:
    """One agent type: live readers per (tier, shard), every configured stream present."""

    agent: str
    instances: int  # live ones
    readers: dict[tuple[str, int], int]

    def unread(self) -> list[tuple[str, int]]:
        return [stream for stream, n in self.readers.items() if n == 0]

    def unread_tiers(self) -> list[str]:
        """Tiers no live worker reads on any shard."""
        tiers = dict.fromkeys(t for t, _ in self.readers)
        return [t for t in tiers if all(n == 0 for (x, _), n in self.readers.items() if x == t)]

    def unread_shards(self) -> list[int]:
        """Shards no live worker reads on any tier."""
        shards = dict.fromkeys(s for _, s in self.readers)
        return [s for s in shards if all(n == 0 for (_, x), n in self.readers.items() if x == s)]

    def summary(self) -> list[str]:
        """The gaps in words, broadest first: a whole tier, a whole shard, then a stream."""
        tiers, shards = self.unread_tiers(), self.unread_shards()
        lines = [f"{self.agent}: tier {t} (every shard)" for t in tiers]
        lines += [f"{self.agent}: shard {s} (every tier)" for s in shards]
        lines += [
            f"{self.agent}: {t} on shard {s}"
            for t, s in self.unread()
            if t not in tiers and s not in shards
        ]
        return lines

    def as_json(self) -> dict[str, object]:
        return {
            "live_instances": self.instances,
            "unread_tiers": self.unread_tiers(),
            "unread_shards": self.unread_shards(),
            "unread_streams": [{"tier": t, "shard": s} for t, s in self.unread()],
        }


async def coverage(registry: Registry, config: FileConfig, agent: str) -> Coverage:
    """Live = a heartbeat within the visibility timeout (as the health view counts fresh)."""
    settings = config.agent_settings(agent)
    everything = Placement.everything(config.tier_names, settings.shards)
    reads = await registry.live_reads(
        agent, stale_ms=settings.visibility_timeout_ms, everything=everything
    )
    readers = {
        (tier, shard): sum(p.reads(tier, shard) for p in reads.values())
        for tier in config.tier_names
        for shard in range(settings.shards)
    }
    return Coverage(agent, len(reads), readers)
