"""Configuration: environment settings over a validated YAML file."""

from deepagents.config.load import load_config, load_settings, load_settings_config, parse_config
from deepagents.config.schema import (
    AgentSettings,
    FileConfig,
    OverdueAction,
    RetryPolicy,
    TierConfig,
)
from deepagents.config.settings import Settings

__all__ = [
    "AgentSettings",
    "FileConfig",
    "OverdueAction",
    "RetryPolicy",
    "Settings",
    "TierConfig",
    "load_config",
    "load_settings",
    "load_settings_config",
    "parse_config",
]
