"""API keys: Vault KV v2 through hvac (against a loopback stand-in), token renewal, the
environment fallback, and the fleet-wide refresh after a 401 (one refresh, fenced)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.config.models import VaultConfig
from deepagents.modelcall import CredentialError, ModelConfig, wrap_model_call
from deepagents.modelcall.credentials import CredentialStore, EnvSource, VaultSource
from deepagents.modelcall.simulator import SimulatorThread
from deepagents.store.models.keys import ModelKeys
from tests.modelcall.conftest import FAST, MakeCalls, model_config
from tests.modelcall.fleet import ROOT, run_fleet
from tests.modelcall.vault_standin import VaultStandIn
from tests.support.wait import eventually

TOKEN = "hvs.standin-token"


@pytest.fixture
def vault() -> Iterator[VaultStandIn]:
    with VaultStandIn(token=TOKEN, ttl_s=30) as standin:
        yield standin


def _vault_config(vault: VaultStandIn) -> VaultConfig:
    return VaultConfig(url=vault.url, path="llm/sim", field="api_key")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_vault_kv2_read(vault: VaultStandIn) -> None:
    vault.put("llm/sim", {"api_key": "sk-one"})
    vault.put("llm/sim", {"api_key": "sk-two"})
    source = VaultSource(_vault_config(vault), TOKEN)
    try:
        assert await source.fetch() == "sk-two"
        assert source.version == 2
    finally:
        await source.aclose()
    assert (vault.counts["lookup"], vault.counts["read"]) == (1, 1)


async def test_vault_token_renewed_at_two_thirds_of_its_ttl(vault: VaultStandIn) -> None:
    vault.put("llm/sim", {"api_key": "sk-one"})
    clock = FakeClock()
    source = VaultSource(_vault_config(vault), TOKEN, clock=clock)
    try:
        await source.fetch()  # looks the token up: ttl 30 s
        clock.now += 19
        await source.fetch()
        assert vault.counts["renew"] == 0
        clock.now += 2  # 21 s > 2/3 of 30 s
        await source.fetch()
        assert vault.counts["renew"] == 1
    finally:
        await source.aclose()


async def test_expired_token_that_cannot_renew_fails_closed(vault: VaultStandIn) -> None:
    vault.put("llm/sim", {"api_key": "sk-one"})
    vault.renewable = False
    clock = FakeClock()
    source = VaultSource(_vault_config(vault), TOKEN, clock=clock)
    try:
        await source.fetch()
        clock.now += 31
        with pytest.raises(CredentialError, match="expired") as caught:
            await source.fetch()
        assert TOKEN not in str(caught.value)
    finally:
        await source.aclose()


@pytest.mark.parametrize("fault", ["bad_token", "down", "missing"])
async def test_vault_failures_fail_closed(vault: VaultStandIn, fault: str) -> None:
    if fault != "missing":
        vault.put("llm/sim", {"api_key": "sk-one"})
    vault.down = fault == "down"
    token = "hvs.wrong" if fault == "bad_token" else TOKEN
    source = VaultSource(_vault_config(vault), token)
    try:
        with pytest.raises(CredentialError) as caught:
            await source.fetch()
        assert "hvs." not in str(caught.value)
    finally:
        await source.aclose()


async def test_env_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIM_API_KEY", "sk-env")
    assert await EnvSource("SIM_API_KEY").fetch() == "sk-env"
    monkeypatch.delenv("SIM_API_KEY")
    with pytest.raises(CredentialError, match="SIM_API_KEY is not set"):
        await EnvSource("SIM_API_KEY").fetch()


async def test_missing_key_refuses_and_falls_back(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url, api_key_env="NO_SUCH_KEY_VAR")})
    reply = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    assert (reply.degraded, reply.reason) == (True, "credential_error")
    assert len(sim.log()) == 0


class CountingSource:
    def __init__(self, values: list[str]) -> None:
        self.values = values
        self.fetches = 0
        self.description = "counting"

    async def fetch(self) -> str:
        self.fetches += 1
        await asyncio.sleep(0.05)  # a slow secret store widens the race
        return self.values[min(self.fetches, len(self.values)) - 1]

    async def aclose(self) -> None:
        return None


async def test_401_in_one_process_refreshes_once(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    source = CountingSource(["sk-old", "sk-new"])
    sim.call(lambda: sim.sim.configure(require_key=True))
    sim.call(lambda: sim.sim.issue_key("sk-old"))
    calls = make_calls({"m": model_config(sim.url)}, sources={"m": source})
    await wrap_model_call("m", prompt="q", calls=calls)
    sim.call(lambda: sim.sim.issue_key("sk-new", revoke_others=True))  # the key is rotated
    replies = await asyncio.gather(
        *(wrap_model_call("m", prompt="q", calls=calls) for _ in range(20))
    )
    assert all(not r.degraded for r in replies)
    assert source.fetches == 2  # the first key, then exactly one refresh
    assert all([a.status_code for a in r.attempts] in ([401, 200], [200]) for r in replies)


async def test_refresh_that_fails_is_bounded(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    source = CountingSource(["sk-old"])  # the store keeps serving the revoked key
    sim.call(lambda: sim.sim.configure(require_key=True))
    calls = make_calls({"m": model_config(sim.url)}, sources={"m": source})
    reply = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    # 401, one refresh (the same dead key), one retry, 401: stop. No loop.
    assert [a.status_code for a in reply.attempts] == [401, 401]
    assert (reply.degraded, reply.reason) == (True, "auth_failed")
    assert source.fetches == 2 and len(sim.log()) == 2


class BlockingSource:
    """Fetches block until released: a lock holder paused in the middle of its refresh."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.description = "blocking"

    async def fetch(self) -> str:
        self.started.set()
        await self.release.wait()
        return self.value

    async def aclose(self) -> None:
        return None


async def test_a_paused_lock_holder_cannot_overwrite_a_newer_key(
    client: Redis, prefix: str
) -> None:
    keys = ModelKeys(prefix, "m")
    stalled_source = BlockingSource("sk-stale")
    paused = CredentialStore(client, keys, stalled_source, lock_ttl_s=0.2)
    active = CredentialStore(client, keys, CountingSource(["sk-fresh"]))
    stalled = asyncio.create_task(paused.refresh(0, timeout_s=10))
    await stalled_source.started.wait()  # it holds the lock and is fetching: now it stalls
    fresh = await active.refresh(0, timeout_s=10)  # gets the lock once the lease ran out
    assert (fresh.secret, fresh.version) == ("sk-fresh", 1)
    stalled_source.release.set()  # it wakes and tries to publish its stale key
    adopted = await stalled
    assert (adopted.secret, adopted.version) == ("sk-fresh", 1)  # refused, then adopted
    assert await client.hget(keys.credential, "secret") == b"sk-fresh"


async def test_a_lock_holder_killed_with_9_holds_up_the_fleet_only_until_its_lease_ends(
    client: Redis, redis_url: str, prefix: str
) -> None:
    keys = ModelKeys(prefix, "m")
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.modelcall.proc_stuck_refresher", redis_url, prefix, "m", "1"],
        cwd=ROOT,
    )
    try:
        await eventually(lambda: client.exists(f"{prefix}:test:fetching"), what="lock taken")
        assert await client.exists(keys.credential_lock)
        holder.kill()  # SIGKILL in the middle of its fetch: it never releases the lock
        assert await asyncio.to_thread(holder.wait, 10) == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    # A lease, not forever: it has a TTL of at most the 1 s it was taken for, or (on a slow
    # machine, past that second already) it is gone.
    lease_ms = await client.pttl(keys.credential_lock)
    assert lease_ms == -2 or 0 < lease_ms <= 1000, lease_ms
    source = CountingSource(["sk-fresh"])
    survivor = CredentialStore(client, keys, source)
    # The dead holder's lease runs out and the survivor takes the lock: no deadlock, and
    # well inside the refresh's own bound (timeout_s).
    fresh = await survivor.refresh(0, timeout_s=5)
    assert (fresh.secret, fresh.version, source.fetches) == ("sk-fresh", 1, 1)
    assert not await client.exists(keys.credential_lock)  # released after the refresh


async def test_401_storm_across_two_processes_refreshes_once(
    sim: SimulatorThread,
    vault: VaultStandIn,
    make_calls: MakeCalls,
    client: Redis,
    redis_url: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim.call(lambda: sim.sim.configure(require_key=True))
    sim.call(lambda: sim.sim.issue_key("sk-old"))
    vault.put("llm/sim", {"api_key": "sk-old"})
    model: dict[str, Any] = {
        "base_url": sim.url,
        **FAST,
        "vault": {"url": vault.url, "path": "llm/sim"},
    }
    monkeypatch.setenv("VAULT_TOKEN", TOKEN)
    # The fleet has been running with the old key (published in Redis, version 1).
    warm = make_calls({"m": ModelConfig.model_validate(model)})
    await wrap_model_call("m", prompt="q", calls=warm)
    # The key is rotated in Vault and revoked at the provider.
    vault.put("llm/sim", {"api_key": "sk-new"})
    sim.call(lambda: sim.sim.issue_key("sk-new", revoke_others=True))
    reads_before = vault.counts["read"]
    spec = {
        "redis_url": redis_url,
        "prefix": prefix,
        "models": {"m": model},
        "model": "m",
        "prompt": "q",
        "calls": 10,
    }
    summaries = await run_fleet(client, spec, processes=2, env={"VAULT_TOKEN": TOKEN})
    results = [r for s in summaries for r in s["results"]]
    assert len(results) == 20 and all(r["ok"] for r in results), results
    assert vault.counts["read"] - reads_before == 1  # the fleet refreshed exactly once
    assert sum(s["refreshes"] for s in summaries) == 1
    assert await client.hget(f"{prefix}:{{model:m}}:cred", "ver") == b"2"


async def test_expiring_simulator_key_is_refreshed(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    source = CountingSource(["sk-short", "sk-next"])
    sim.call(lambda: sim.sim.configure(require_key=True))
    sim.call(lambda: sim.sim.issue_key("sk-short", ttl_s=0.3))
    sim.call(lambda: sim.sim.issue_key("sk-next"))
    calls = make_calls({"m": model_config(sim.url)}, sources={"m": source})
    assert not (await wrap_model_call("m", prompt="q", calls=calls)).degraded

    async def expired() -> bool:
        return not sim.call(lambda: sim.sim._key_ok({"authorization": "Bearer sk-short"}))

    await eventually(expired, timeout=10, what="the short-lived key expired")
    reply = await wrap_model_call("m", prompt="q", calls=calls)
    assert [a.status_code for a in reply.attempts] == [401, 200] and source.fetches == 2
