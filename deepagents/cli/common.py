"""Shared plumbing of the CLI commands: settings, config, Redis, running a coroutine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.compose import redis_client as redis_client  # the commands open clients here
from deepagents.config import FileConfig, Settings, load_config, load_settings
from deepagents.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Runtime:
    settings: Settings
    config: FileConfig


def load_runtime(config_path: str | None = None) -> Runtime:
    settings = load_settings()
    if config_path:
        settings = settings.model_copy(update={"config": Path(config_path)})
    return Runtime(settings, load_config(settings.config_path()))


def require_redis_url(settings: Settings) -> str:
    if settings.redis_url is None:
        raise ConfigError(
            "DEEPAGENTS_REDIS_URL is not set (only `deepagents demo` starts its own Redis)",
            file="environment",
        )
    return settings.redis_url.get_secret_value()


@contextlib.contextmanager
def embedded_redis_if_needed(settings: Settings) -> Any:
    """Yield a Redis URL: the configured one, or an embedded server's for this process."""
    if settings.redis_url is not None:
        yield settings.redis_url.get_secret_value()
        return
    with EmbeddedRedis() as server:
        yield server.url


def run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)
