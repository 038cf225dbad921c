"""``GET /v1/agents`` on a registry hash with a malformed field (issue 16, finding 6): the
gateway answers 200, reads the field as absent, and moves it to the agent's dead-letter
stream (``decode_error``), once, counting it in its ``/metrics``."""

from __future__ import annotations

import httpx

from tests.gateway.conftest import Deployment
from tests.gateway.procs import Gateway, auth
from tests.telemetry.support import samples


def _decode_errors(text: str) -> float:
    found = samples(text).get("deepagents_decode_errors_total", [])
    return sum(v for labels, v in found if labels == {"agent": "echo", "structure": "registry"})


def test_a_malformed_intents_field_is_moved_aside_not_a_500(
    deployment: Deployment, gateway: Gateway
) -> None:
    r = deployment.redis
    agent_key, dlq = f"{deployment.prefix}:agent:echo", f"{deployment.prefix}:{{echo:0}}:dlq"
    r.sadd(f"{deployment.prefix}:agents", "echo")
    r.hset(agent_key, mapping={"version": "1.0.0", "intents": "[1, {"})
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        for _ in range(2):  # the second read finds the field gone: nothing more to move
            answer = http.get("/v1/agents", headers=auth())
            assert answer.status_code == 200, answer.text
            (echo,) = [a for a in answer.json()["agents"] if a["name"] == "echo"]
            assert echo["intents"] == [] and echo["version"] == "1.0.0"
        metrics = http.get("/metrics").text
    entries: list[tuple[bytes, dict[bytes, bytes]]] = r.xrange(dlq)  # type: ignore[assignment]
    letters = [fields for _, fields in entries]
    assert [(f[b"source"], f[b"field"], f[b"reason"], f[b"orig_value"]) for f in letters] == [
        (agent_key.encode(), b"intents", b"decode_error", b"[1, {")
    ]
    assert r.hget(agent_key, "intents") is None
    assert _decode_errors(metrics) == 1
