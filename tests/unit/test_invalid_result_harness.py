"""deepagents.testing: an agent that breaks its contract makes ``h.run`` raise at once (its
first run), never hang until a timeout nor retry a bug as if it were bad luck."""

from __future__ import annotations

import pytest

from deepagents import Task
from deepagents.errors import ErrorCode, InvalidResult
from deepagents.testing import AgentHarness
from tests.contract_breakers import BREAKERS, RUNS, SECRET


@pytest.mark.parametrize("case", list(BREAKERS))
async def test_a_broken_contract_raises_at_once_with_its_cause(case: str) -> None:
    agent, cause = BREAKERS[case]
    RUNS.clear()
    async with AgentHarness(agent) as h:
        with pytest.raises(InvalidResult) as raised:
            # A timeout far below the retries' total: a retried bug would miss it.
            await h.run(Task(intent=agent.intents[0], payload={"k": SECRET}), timeout=5)
        dead = await h.dead_letters()
    assert cause in str(raised.value)
    assert SECRET not in str(raised.value)
    assert [(d.reason, d.deliveries) for d in dead] == [(ErrorCode.INVALID_RESULT, 1)]
    assert RUNS[agent.name] == 1
