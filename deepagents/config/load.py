"""Load and validate configuration. Errors name the file, the field and the reason."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from deepagents.config.rules import RuleError, compile_match
from deepagents.config.schema import FileConfig
from deepagents.config.settings import Settings
from deepagents.errors import ConfigError

MAX_CONFIG_BYTES = 1_048_576


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that also refuses aliases (billion-laughs) and duplicate keys."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.constructor.ConstructorError(
                None, None, "anchors and aliases are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_config(text: str, *, source: str = "<config>") -> FileConfig:
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}".replace("\n", " "), file=source) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping", file=source)
    try:
        config = FileConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        reason = first["msg"]
        more = len(exc.errors()) - 1
        if more:
            reason += f" (and {more} more error{'s' if more > 1 else ''})"
        raise ConfigError(reason, file=source, field=_loc(first["loc"]) or None) from exc
    for i, strategy in enumerate(config.strategies):
        try:
            compile_match(strategy.match)
        except RuleError as exc:
            raise ConfigError(str(exc), file=source, field=f"strategies[{i}].match") from exc
    return config


def load_config(path: str | os.PathLike[str] | None) -> FileConfig:
    """Read the YAML file (or the built-in defaults when ``path`` is None)."""
    if path is None:
        return FileConfig()
    path = Path(path)
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes", file=str(path))
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError("file not found", file=str(path)) from exc
    except IsADirectoryError as exc:
        raise ConfigError("is a directory, not a file", file=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason})", file=str(path)) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    return parse_config(text, source=str(path))


def load_settings() -> Settings:
    """Build Settings from the environment; errors name the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "DEEPAGENTS_" + str(first["loc"][0]).upper() if first["loc"] else None
        raise ConfigError(first["msg"], file="environment", field=field) from exc
