"""Audit fixtures: a schema of its own per test in the real PostgreSQL of ``pg_url``
(tests/conftest.py; dropped afterwards), settings pointing at it and the test's Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from pydantic import SecretStr

from deepagents.config import FileConfig, Settings, load_config
from deepagents.store.audit.embedded import EmbeddedPostgres

AUDIT_CONFIG = """
tiers:
  p0: {concurrency: 20, max_wait_ms: 60000}
  p1: {concurrency: 50, max_wait_ms: 60000}
  p2: {concurrency: 200, max_wait_ms: 600000}
default_tier: p2
defaults:
  shards: 2
  max_deliveries: 3
  visibility_timeout_ms: 2000
  block_ms: 100
  retry: {base_ms: 10, max_ms: 50}
agents:
  echo: {class: "agents.echo:EchoAgent"}
"""


@pytest.fixture
async def schema(pg_url: str) -> AsyncIterator[str]:
    name = f"audit_t{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        conn = await asyncpg.connect(pg_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await conn.close()


@pytest.fixture
async def db(pg_url: str, schema: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the test's schema (the schema may not exist yet)."""
    conn = await asyncpg.connect(pg_url, server_settings={"search_path": schema})
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "deepagents.yaml"
    path.write_text(AUDIT_CONFIG)
    return path


@pytest.fixture
def config(config_path: Path) -> FileConfig:
    return load_config(config_path)


@pytest.fixture
def audit_settings(settings: Settings, pg_url: str, schema: str) -> Settings:
    return settings.model_copy(
        update={
            "database_url": SecretStr(pg_url),
            "audit_schema": schema,
            "audit_batch_wait_ms": 50,
            "allow_evicting_redis": True,
        }
    )


@pytest.fixture
def private_pg() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test alone: the one a test may stop and start."""
    with EmbeddedPostgres() as server:
        yield server
