"""``SIGHUP`` makes a gateway process read its config file again (RELIABILITY row 53).

A file that fails to load, or that the running fleet cannot take (other tiers, another
shard count), changes nothing: the running config stays, the failure is logged with the
file, the field and the reason, and ``deepagents_gateway_config_reloads_total`` counts it
under ``outcome="failed"``. A good file is swapped in whole (``GatewayState.reload``).

With ``--workers N``, uvicorn's parent process takes the ``SIGHUP`` instead and replaces
the worker processes one by one, each reading the file as it starts; one that cannot start
with the new file is stopped and the old process kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

from deepagents.config.load import load_config
from deepagents.errors import ConfigError
from deepagents.gateway.metrics import GatewayMetrics
from deepagents.gateway.state import GatewayState

log = logging.getLogger("deepagents.gateway")


@contextlib.contextmanager
def reload_on_hangup(
    state: GatewayState, path: Path | None, metrics: GatewayMetrics
) -> Iterator[None]:
    """While the block runs, ``SIGHUP`` reloads ``path`` into ``state``. Without signals
    here (not the main thread: an app embedded in a test client), it does nothing."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGHUP, reload_config, state, path, metrics)
    except (NotImplementedError, RuntimeError, ValueError):
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)


def reload_config(state: GatewayState, path: Path | None, metrics: GatewayMetrics) -> None:
    """One reload: the new file in service, or the running one kept and the failure told."""
    try:
        state.reload(load_config(path))
    except ConfigError as exc:
        log.error("config reload failed, the running config stays: %s", exc,
                  extra={"action": "config_reload_failed"})  # fmt: skip
    except Exception:  # a bug must not take the gateway down with it
        log.exception("config reload failed, the running config stays",
                      extra={"action": "config_reload_failed"})  # fmt: skip
    else:
        metrics.config_reloads.labels("ok").inc()
        log.info("config reloaded from %s", path or "the defaults",
                 extra={"action": "config_reloaded"})  # fmt: skip
        return
    metrics.config_reloads.labels("failed").inc()
