"""Load and validate configuration. Errors name the file, the field and the reason."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from deepagents.config.rules import RuleError, compile_match
from deepagents.config.schema import FileConfig
from deepagents.config.settings import Settings
from deepagents.errors import ConfigError

MAX_CONFIG_BYTES = 1_048_576
# Far deeper than any real configuration, far below the interpreter's recursion limit
# (PyYAML composes and constructs nested nodes recursively).
MAX_DEPTH = 64
MAX_INT_DIGITS = 64  # int("9" * 5000) raises ValueError past Python's 4,300-digit limit


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that also refuses aliases (billion-laughs), duplicate keys, nesting deeper
    than MAX_DEPTH and integers longer than MAX_INT_DIGITS."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.constructor.ConstructorError(
                None, None, "anchors and aliases are not allowed", event.start_mark
            )
        if self._depth >= MAX_DEPTH:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: Any) -> Any:
        if len(str(node.value)) > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer longer than {MAX_INT_DIGITS} digits", node.start_mark
            )
        return super().construct_yaml_int(node)

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


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


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
    return parse_config(read_config_text(path), source=str(path))


def load_settings_config(settings: Settings) -> FileConfig:
    """The file the settings name; a missing default file says where it was looked for."""
    path = settings.config_path()
    if settings.config is None and not path.exists():
        raise ConfigError(
            f"no config file at {path.absolute()} (the default, relative to the working "
            "directory): set DEEPAGENTS_CONFIG or pass --config",
            file="environment",
            field="DEEPAGENTS_CONFIG",
        )
    return load_config(path)


def read_config_text(path: Path) -> str:
    """The file's text, refusing anything but a regular file up to MAX_CONFIG_BYTES: a
    device such as /dev/zero reads forever, and a FIFO blocks the open until a writer
    comes (O_NONBLOCK opens it at once, and fstat then refuses it)."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise ConfigError("file not found", file=where) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=where) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise ConfigError("is a directory, not a file", file=where)
        raise ConfigError("not a regular file (a device, FIFO or socket)", file=where)
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror}", file=where) from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes", file=where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason})", file=where) from exc


def load_settings() -> Settings:
    """Build Settings from the environment; errors name the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "DEEPAGENTS_" + str(first["loc"][0]).upper() if first["loc"] else None
        reason = first["msg"].removeprefix("Value error, ")
        raise ConfigError(reason, file="environment", field=field) from exc
