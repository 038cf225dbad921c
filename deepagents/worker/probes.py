"""``/healthz`` and ``/readyz`` of a worker process, served beside its ``/metrics``.

The server starts before the worker exists (it needs a Redis client, made in the event
loop), so the probes are bound to it once it does: until then alive, not ready.
"""

from __future__ import annotations

from deepagents.telemetry.serve import Probes
from deepagents.worker.worker import Worker


class WorkerProbes:
    def __init__(self) -> None:
        self.worker: Worker | None = None

    def live(self) -> bool:
        return self.worker is None or self.worker.live()

    def ready(self) -> bool:
        return self.worker is not None and self.worker.accepting()

    def probes(self) -> Probes:
        return Probes(live=self.live, ready=self.ready)
