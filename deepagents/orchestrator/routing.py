"""Routing: intent → agent type, strategy rules → tier, stable hash of task_id → shard."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ValidationError

from deepagents.config.rules import Predicate, compile_match
from deepagents.config.schema import FileConfig
from deepagents.contract.agent import AgentContract
from deepagents.contract.loading import load_agent_class
from deepagents.contract.task import Task
from deepagents.errors import ConfigError, InvalidPayload, UnknownIntent
from deepagents.transport.base import StreamRef
from deepagents.transport.keys import Keys, shard_of


@dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str
    intents: tuple[str, ...]
    shards: int
    max_backlog: int
    input_model: type[BaseModel] | None = None


@dataclass(frozen=True, slots=True)
class Route:
    agent: str
    tier: str
    shard: int
    stream: StreamRef


def agent_specs(
    config: FileConfig, classes: Iterable[type[AgentContract]] = ()
) -> dict[str, AgentSpec]:
    """Agent types from the config file (importing their ``class``) and from classes given."""
    found: dict[str, tuple[tuple[str, ...], type[BaseModel] | None]] = {}
    for cls in classes:
        found[cls.name] = (tuple(cls.intents), cls.input_model)
    for name, entry in config.agents.items():
        intents, model = found.get(name, ((), None))
        if entry.class_path:
            try:
                cls = load_agent_class(entry.class_path)
            except ConfigError as exc:
                raise ConfigError(exc.reason, field=f"agents.{name}.class") from exc
            if cls.name != name:
                raise ConfigError(
                    f"class {entry.class_path} is named {cls.name!r}", field=f"agents.{name}.class"
                )
            intents, model = tuple(cls.intents), cls.input_model
        found[name] = (tuple(dict.fromkeys((*intents, *entry.intents))), model)
    specs = {}
    for name, (intents, model) in found.items():
        settings = config.agent_settings(name)
        specs[name] = AgentSpec(name, intents, settings.shards, settings.max_backlog, model)
    return specs


INTERNAL_PREFIX = "deepagents."  # intents of the runtime itself (the gateway's probe)


def internal(intent: str) -> bool:
    """An intent the runtime serves for itself: routed, never listed to callers."""
    return intent.startswith(INTERNAL_PREFIX)


@dataclass(slots=True)
class Routes:
    """The config and the router in force. The orchestrator's parts read them here, so a
    ``reload`` that replaces both reaches every part at once."""

    config: FileConfig
    router: Router


class VersionPicker(Protocol):
    """The rollout hook (``orchestrator/versions.py``): the agent version a new task goes
    to, "" for an agent under no rollout (its unversioned streams)."""

    def version_for(self, agent: str, task: Task) -> str: ...


class Router:
    def __init__(
        self,
        config: FileConfig,
        specs: dict[str, AgentSpec],
        keys: Keys,
        versions: VersionPicker | None = None,
    ) -> None:
        self.config = config
        self.specs = specs
        self.keys = keys
        self.versions = versions
        # Routes built once per (agent, shard, version, tier), a few dozen in all: built per
        # task instead, they were most of a batch submit's routing cost (docs/benchmarks.md,
        # "Plain code on the delivery path": kept, it pays on the submit benchmark).
        self._routes: dict[tuple[str, int, str, str], Route] = {}
        self.by_intent: dict[str, AgentSpec] = {}
        for spec in specs.values():
            for intent in spec.intents:
                other = self.by_intent.get(intent)
                if other is not None and other.name != spec.name:
                    raise ConfigError(
                        f"intent {intent!r} is served by both {other.name!r} and {spec.name!r}"
                    )
                self.by_intent[intent] = spec
        self.rules: list[tuple[Predicate, str]] = [
            (compile_match(s.match), s.tier) for s in config.strategies
        ]
        self.tiers = config.tier_names
        self.fallback_tier = config.fallback_tier

    def known_intents(self) -> str:
        """The intents a caller may send, for an unknown-intent error (none internal)."""
        return ", ".join(i for i in sorted(self.by_intent) if not internal(i)) or "none"

    def route(self, task: Task) -> Route:
        spec = self.by_intent.get(task.intent)
        if spec is None:
            raise UnknownIntent(
                f"no agent serves intent {task.intent!r} (known: {self.known_intents()})"
            )
        if spec.input_model is not None:
            try:
                spec.input_model.model_validate(task.payload)
            except ValidationError as exc:
                raise InvalidPayload(_explain(task.intent, exc)) from exc
        tier = self.tier_for(task)
        shard = shard_of(task.task_id, spec.shards)
        version = "" if self.versions is None else self.versions.version_for(spec.name, task)
        found = self._routes.get((spec.name, shard, version, tier))
        if found is None:
            keys = self.keys.shard(spec.name, shard, version)
            found = Route(spec.name, tier, shard, StreamRef(keys, tier))
            self._routes[(spec.name, shard, version, tier)] = found
        return found

    def tier_for(self, task: Task) -> str:
        for predicate, tier in self.rules:
            if predicate(task):
                return tier
        if task.priority is not None:
            return self.tiers[min(task.priority, len(self.tiers) - 1)]
        return self.fallback_tier


def _explain(intent: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "payload"
        parts.append(f"payload.{where}: {err['msg']}" if err["loc"] else f"payload: {err['msg']}")
    return f"invalid payload for intent {intent!r}: " + "; ".join(parts)
