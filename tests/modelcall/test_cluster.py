"""The model-call layer on Redis Cluster. Its shared state (breaker, budgets, quotas,
rate and concurrency limits, the fleet's credential) keeps each model's keys under one
hash tag, ``{model:<name>}``, so every script runs in one slot. redis-py's cluster client
(and a cluster node after it, CROSSSLOT) refuses any command whose keys span slots: the
single-node tests below, imported and run again here with a cluster client, show that
none does."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import RedisCluster

from tests.modelcall.test_admission import (  # noqa: F401 - collected and run again here
    test_fleet_concurrency_limit,
    test_requests_per_window_wait_then_admit,
    test_reservation_is_corrected_to_the_reported_usage,
)
from tests.modelcall.test_budget_holds import (  # noqa: F401
    server,
    test_a_failed_call_releases_its_hold,
)
from tests.modelcall.test_credentials import (  # noqa: F401
    test_401_in_one_process_refreshes_once,
    test_a_paused_lock_holder_cannot_overwrite_a_newer_key,
)
from tests.modelcall.test_gates import (  # noqa: F401
    test_breaker_is_shared_by_the_fleet,
    test_breaker_opens_then_one_probe_closes_it,
    test_budget_exhausted_uses_the_fallback,
    test_failed_probe_reopens,
    test_request_quota_per_tenant,
)
from tests.modelcall.test_token_debt import (  # noqa: F401
    test_debt_outlives_the_reservations_bucket,
)


@pytest.fixture
async def client(cluster: RedisCluster) -> AsyncIterator[RedisCluster]:
    """The cluster client in place of the single-node one, for every test here."""
    yield cluster
