"""Shared plumbing of the CLI commands: settings, config, Redis, running a coroutine, and
the one way a command reports a DeepAgentsError (``report``)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.compose import redis_client as redis_client  # the commands open clients here
from deepagents.config import FileConfig, Settings, load_settings, load_settings_config
from deepagents.errors import ConfigError, DeepAgentsError

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")

EXIT_USAGE = 2
EXIT_ERROR = 1
UNWRAPPED_WIDTH = 1_000  # columns given to rich off a terminal: wide enough for any table


def report(exc: DeepAgentsError) -> int:
    """Print the error as one line on stderr; return the exit code (2 for configuration)."""
    reason = " ".join(str(exc).split())  # one line, even for a multi-line reason
    print(f"deepagents: error: {reason}", file=sys.stderr, flush=True)
    return EXIT_USAGE if exc.code == "config_error" else EXIT_ERROR


@dataclass(frozen=True, slots=True)
class Runtime:
    settings: Settings
    config: FileConfig

    def check_agents(self) -> None:
        """Import every agent class the file names, so a bad ``class:`` fails now, with the
        file and the field, rather than inside a server's start-up."""
        # Here, not at the top: the worker's command shares this module and never routes.
        from deepagents.orchestrator.routing import agent_specs

        try:
            agent_specs(self.config)
        except ConfigError as exc:
            where = str(self.settings.config_path())
            raise ConfigError(exc.reason, file=exc.file or where, field=exc.field) from exc


def load_runtime(config_path: str | None = None) -> Runtime:
    settings = load_settings()
    if config_path:
        settings = settings.model_copy(update={"config": Path(config_path)})
    runtime = Runtime(settings, load_settings_config(settings))
    runtime.check_agents()
    return runtime


def require_redis_url(settings: Settings) -> str:
    if settings.redis_url is None:
        raise ConfigError(
            "DEEPAGENTS_REDIS_URL is not set (only `deepagents demo` starts its own Redis)",
            file="environment",
        )
    return settings.redis_url.get_secret_value()


def require_reachable(url: str, *, cluster: bool = False) -> None:
    """Fail now, in one line, if Redis cannot be reached (before starting anything else)."""

    async def ping() -> None:
        async with redis_client(url, max_connections=1, cluster=cluster):
            pass

    run(ping())


@contextlib.contextmanager
def embedded_redis_if_needed(settings: Settings) -> Any:
    """Yield a Redis URL: the configured one, or an embedded server's for this process."""
    if settings.redis_url is not None:
        yield settings.redis_url.get_secret_value()
        return
    with EmbeddedRedis() as server:
        yield server.url


def console() -> Console:
    """Rich output for a command: off a terminal (a pipe, a file) tables never wrap, since
    a wrapped table cannot be read back or grepped."""
    from rich.console import Console  # here: a worker's start never pays for rich

    return Console() if sys.stdout.isatty() else Console(width=UNWRAPPED_WIDTH)


def run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)
