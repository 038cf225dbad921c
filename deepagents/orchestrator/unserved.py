"""Whether a submit's agent type has a live worker. A task for an agent no worker serves is
still accepted (a worker may be starting), but its submitter is told: the handle carries a
warning, the gateway sends it in a header and the 202 body, the log says it (once a
minute per agent). Live: a registry heartbeat within the agent's ``dead_after_ms``, as the
workers' own liveness watch counts it. Asked at most once a second per agent, so a busy
submitter pays a dictionary lookup per task."""

from __future__ import annotations

import logging
import time

from deepagents.config.schema import FileConfig
from deepagents.errors import TransportError
from deepagents.store.base import Registry

log = logging.getLogger("deepagents.orchestrator")
CHECK_EVERY_S = 1.0
LOG_EVERY_S = 60.0


def no_worker_warning(agent: str) -> str:
    return f"no live worker serves agent {agent!r}: its tasks wait until one starts"


class Unserved:
    def __init__(self, registry: Registry, config: FileConfig) -> None:
        self.registry, self.config = registry, config
        self._checked: dict[str, tuple[float, str | None]] = {}  # agent -> (when, warning)
        self._logged: dict[str, float] = {}

    def reload(self, config: FileConfig) -> None:
        """Judge liveness by ``config``'s ``dead_after_ms`` from the next submit on."""
        self.config = config
        self._checked.clear()

    async def warning(self, agent: str) -> str | None:
        """A warning when no live worker serves ``agent``; None when one does, or when the
        registry cannot be read (the submit itself went through)."""
        now = time.monotonic()
        checked = self._checked.get(agent)
        if checked is not None and now - checked[0] < CHECK_EVERY_S:
            return checked[1]
        try:
            beats = await self.registry.last_beats(agent)
        except TransportError:
            return None
        dead_after_ms = self.config.agent_settings(agent).dead_after_ms
        wall_ms = time.time() * 1000
        live = any(wall_ms - beat < dead_after_ms for beat in beats.values())
        warning = None if live else no_worker_warning(agent)
        self._checked[agent] = (now, warning)
        if warning is not None and now - self._logged.get(agent, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[agent] = now
            log.warning(
                "%s (accepted anyway)", warning, extra={"action": "no_live_worker", "agent": agent}
            )
        return warning
