"""Process settings from ``DEEPAGENTS_*`` environment variables (over the YAML file)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_CONFIG_PATH = Path("config/deepagents.yaml")
REDIS_SCHEMES = ("redis", "rediss", "unix")


def _secrets_dir() -> str | None:
    """Where `docker compose` and Kubernetes mount secrets: any setting may be a file there,
    named like its variable (``deepagents_database_url``), so no secret sits in the env."""
    path = os.environ.get("DEEPAGENTS_SECRETS_DIR", "/run/secrets")
    return path if os.path.isdir(path) else None


class Settings(BaseSettings):
    """Environment settings. The YAML file (``config``) holds tiers, strategies and agents."""

    model_config = SettingsConfigDict(
        env_prefix="DEEPAGENTS_", extra="ignore", frozen=True, secrets_dir=_secrets_dir()
    )

    redis_url: SecretStr | None = Field(
        default=None, description="redis://…; unset: the CLI starts an embedded Redis"
    )
    redis_cluster: bool = Field(
        default=False, description="DEEPAGENTS_REDIS_URL names a node of a Redis Cluster"
    )
    database_url: SecretStr | None = Field(default=None, description="PostgreSQL for the audit log")
    config: Path | None = Field(default=None, description="YAML file with tiers/strategies/agents")
    prefix: str = Field(default="da", pattern=r"^[A-Za-z0-9_-]{1,32}$")
    outbox: bool = Field(
        default=False,
        description="append audit events to the per-shard outbox streams (needs an audit writer)",
    )
    allow_evicting_redis: bool = Field(
        default=False, description="run even if Redis may evict keys (loses tasks; tests only)"
    )
    consumer: str | None = Field(default=None, max_length=128, pattern=r"^[A-Za-z0-9_.@-]+$")
    max_payload_bytes: int = Field(default=1_048_576, ge=1024)
    result_ttl_s: int = Field(default=86_400, ge=1)
    idempotency_ttl_s: int = Field(default=86_400, ge=1)
    # At most a week: a task's location record outlives its submit by result_ttl_s + 7 days.
    max_schedule_ahead_s: int = Field(
        default=86_400,
        ge=0,
        le=7 * 86_400,
        description="how far ahead a task's not_before may be (0: tasks run now only)",
    )
    min_replicas: int = Field(
        default=0,
        ge=0,
        description="a submit is acknowledged once this many replicas hold its tasks (WAIT); "
        "0: once the primary does (a failover can then lose the last writes)",
    )
    replica_wait_ms: int = Field(
        default=1_000, ge=1, description="how long a submit waits for min_replicas"
    )
    log_level: str = Field(default="INFO")
    sim_model_url: str | None = Field(
        default=None,
        description="point every configured model at this model SIMULATOR (the demo sets it)",
    )
    # audit writer (deepagents.store.audit); see docs/audit.md
    audit_schema: str = Field(default="public", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    audit_batch_size: int = Field(default=5_000, ge=1, le=100_000, description="events per COPY")
    audit_batch_wait_ms: int = Field(default=200, ge=1, description="max wait to fill a batch")
    audit_claim_idle_ms: int = Field(default=30_000, ge=100, description="reclaim after this idle")
    audit_lock_timeout_ms: int = Field(
        default=5_000, ge=1, description="a write waiting this long for a lock fails and is retried"
    )
    audit_statement_timeout_ms: int = Field(
        default=30_000, ge=1, description="a write running this long fails and is retried"
    )
    audit_retention_days: int | None = Field(
        default=None, ge=1, description="drop older partitions"
    )
    audit_redact_keys: str = Field(
        default="", description="extra secret key names, comma-separated"
    )
    audit_max_string: int = Field(default=2_048, ge=64, description="longer strings are truncated")
    audit_max_snapshot_bytes: int = Field(default=16_384, ge=256, description="per payload/output")
    audit_hash_key: SecretStr | None = Field(default=None, description="HMAC key for prompt hashes")
    # observability (deepagents.telemetry); see docs/observability.md
    metrics: bool = Field(default=True, description="record Prometheus metrics in-process")
    metrics_port: int | None = Field(
        default=None, ge=0, le=65_535, description="worker /metrics port; unset: not served"
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="address a worker's /metrics listens on; loopback unless set (0.0.0.0 "
        "for a scraper on another host)",
    )
    tracing: bool = Field(default=True, description="continue/emit W3C trace context and spans")
    otlp_endpoint: str | None = Field(
        default=None, description="OTLP/HTTP traces endpoint; unset: no exporter"
    )
    trace_file: Path | None = Field(
        default=None, description="write finished spans as JSON lines here (tests, debugging)"
    )
    log_format: str = Field(default="auto", pattern=r"^(auto|json|human)$")
    debug_loggers: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_.,]*$",
        description="other libraries' loggers to write at DEBUG with -v, comma-separated "
        "(e.g. redis,httpx); unnamed ones stay at INFO",
    )
    health_interval_s: float = Field(default=30.0, gt=0, description="agent health_check period")

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: SecretStr | None) -> SecretStr | None:
        # Checked here, so every command refuses a bad URL with the same line; the value
        # itself is never echoed (it may hold a password).
        if value is not None:
            redis_url_problem(value.get_secret_value())
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        value = value.upper()
        if value not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("one of DEBUG, INFO, WARNING, ERROR")
        return value

    def config_path(self) -> Path:
        """The YAML file to read: DEEPAGENTS_CONFIG, else config/deepagents.yaml in the
        working directory. A missing default is an error (ConfigError from the loader),
        not an empty configuration: a worker or publisher that silently knows no agents
        looks healthy and routes nothing."""
        return self.config if self.config is not None else DEFAULT_CONFIG_PATH

    def consumer_name(self) -> str:
        return self.consumer or f"{socket.gethostname()}-{os.getpid()}"


def redis_url_problem(url: str) -> None:
    """Raise ValueError saying what is wrong with a Redis URL (without repeating it)."""
    example = "e.g. redis://127.0.0.1:6379/0"
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in REDIS_SCHEMES:
        got = f"scheme {scheme!r}" if scheme else "no scheme"
        raise ValueError(f"must be a redis://, rediss:// or unix:// URL, {example} (got {got})")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ValueError(f"is not a valid URL ({exc}), {example}") from None
    if scheme != "unix" and not parts.hostname:
        raise ValueError(f"names no host, {example}")
    if scheme == "unix" and not parts.path:
        raise ValueError("names no socket path, e.g. unix:///run/redis.sock")
