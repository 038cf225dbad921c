"""The durable-steps e2e tests' config: the pipeline agent over two shards, fast timeouts."""

from __future__ import annotations

from pathlib import Path

CONFIG = """
tiers:
  p2: {{concurrency: {concurrency}, max_wait_ms: 600000}}
default_tier: p2
defaults:
  shards: 2
  max_deliveries: {max_deliveries}
  visibility_timeout_ms: 1000
  block_ms: 200
  grace_period_s: 5
  retry: {{base_ms: 20, max_ms: 200}}
agents:
  pipeline: {{class: "{agent}"{settings}}}
"""


def write_config(
    tmp_path: Path,
    *,
    concurrency: int = 10,
    max_deliveries: int = 5,
    agent: str = "tests.steps_agents:PipelineAgent",
    settings: str = "",
    name: str = "steps.yaml",
) -> Path:
    """``settings``: the agent's own, as YAML flow text (``heartbeat_ms: 600000``)."""
    path = tmp_path / name
    extra = f", settings: {{{settings}}}" if settings else ""
    path.write_text(
        CONFIG.format(
            concurrency=concurrency, max_deliveries=max_deliveries, agent=agent, settings=extra
        )
    )
    return path
