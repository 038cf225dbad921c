"""Load an agent class named ``module.path:ClassName`` (from the CLI or the config file)."""

from __future__ import annotations

import importlib

from deepagents.contract.agent import AgentContract
from deepagents.contract.task import AGENT_NAME_RE
from deepagents.errors import ConfigError


def load_agent_class(path: str) -> type[AgentContract]:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{path!r}: expected 'module.path:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{path!r}: cannot import {module_name!r} ({exc})") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise ConfigError(f"{path!r}: no class {attr!r} in {module_name}")
    if not isinstance(cls, type):
        raise ConfigError(f"{path!r}: {attr!r} is a {type(cls).__name__}, not a class")
    if not issubclass(cls, AgentContract):
        raise ConfigError(f"{path!r}: {attr} is not an AgentContract subclass")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not AGENT_NAME_RE.match(name):
        raise ConfigError(f"{path!r}: 'name' must be 1-64 of a-z 0-9 _ - (got {name!r})")
    return cls
