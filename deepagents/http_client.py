"""HTTP client for the deepagents gateway (httpx), sync and async.

Retries 429 and 503 (nothing was enqueued: the gateway refused before enqueueing) after
the ``Retry-After`` the gateway sent, capped, with jitter so a fleet of clients does not
come back in step. A ``503 dropped`` (the task waited past its tier's max wait and was
dropped unrun) is the exception to "nothing was enqueued": retrying submits the task anew,
which is what Retry-After asks, except with an ``idempotency_key``, whose repeat would find
the dropped task again, so it is raised at once. Network errors are retried only for reads
and for submits carrying an ``idempotency_key``, where a repeat cannot create a second
task. Other errors raise ``GatewayError`` with the problem document.

    with GatewayClient("http://127.0.0.1:8080", api_key) as gw:
        view = gw.submit("echo", {"x": 1}, wait=10)
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
import httpx

from deepagents.errors import DeepAgentsError, ErrorCode

RETRY_STATUSES = frozenset({429, 503})


class GatewayError(DeepAgentsError):
    """A non-retryable error response (or retries ran out): ``problem`` says what to fix."""

    code = ErrorCode.HTTP_ERROR

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.retryable = status in RETRY_STATUSES  # retries ran out; later it may pass
        self.problem = problem
        sent = str(problem.get("code", ErrorCode.HTTP_ERROR))
        try:
            self.code = ErrorCode(sent)
        except ValueError:  # a newer gateway's code: ``problem`` still holds it
            self.code = ErrorCode.HTTP_ERROR
        super().__init__(f"{status} {sent}: {problem.get('detail', '')}")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    max_delay_s: float = 30.0
    backoff_s: float = 0.2  # for network errors, which carry no Retry-After

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        header = response.headers.get("retry-after") if response is not None else None
        try:
            base = float(header) if header is not None else self.backoff_s * 2**attempt
        except ValueError:  # an HTTP date: rare from our gateway, treat as "a while"
            base = self.backoff_s * 2**attempt
        return min(self.max_delay_s, base) * random.uniform(1.0, 1.25)


def _task_body(intent: str, payload: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"intent": intent, "payload": payload or {}}
    body.update({k: v for k, v in fields.items() if v is not None})
    if isinstance(body.get("deadline"), datetime):
        body["deadline"] = body["deadline"].isoformat()
    return body


def _wait_params(wait: float | None) -> dict[str, float]:
    return {} if wait is None else {"wait": wait}


def _result(response: httpx.Response) -> Any:
    if response.is_success:
        return response.json()
    try:
        problem = response.json()
    except ValueError:
        problem = {"detail": response.text[:500]}
    raise GatewayError(response.status_code, problem if isinstance(problem, dict) else {})


def _may_retry_network(method: str, body: dict[str, Any] | None) -> bool:
    return method == "GET" or bool(body and body.get("idempotency_key"))


def _may_retry(response: httpx.Response, body: dict[str, Any] | None) -> bool:
    if response.status_code not in RETRY_STATUSES:
        return False
    if not (body and body.get("idempotency_key")):
        return True
    try:  # a dropped task's key names that task: a repeat would only find it dropped again
        return bool(response.json().get("code") != ErrorCode.DROPPED)
    except (ValueError, AttributeError):
        return True


class GatewayClient:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {api_key}"},
        )

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, float] | None = None,
    ) -> Any:
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                response = self._http.request(method, path, json=json, params=params)
            except httpx.TransportError:
                if last or not _may_retry_network(method, json):
                    raise
                time.sleep(self.retry.delay(attempt, None))
                continue
            if last or not _may_retry(response, json):
                return _result(response)
            time.sleep(self.retry.delay(attempt, response))
        raise AssertionError("unreachable")  # pragma: no cover

    def submit(
        self,
        intent: str,
        payload: dict[str, Any] | None = None,
        *,
        wait: float | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """202 body (task_id, agent, tier, …), or the finished task when ``wait`` sufficed."""
        body = _task_body(intent, payload, **fields)
        return dict(self._call("POST", "/v1/tasks", json=body, params=_wait_params(wait)))

    def submit_batch(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(self._call("POST", "/v1/tasks/batch", json={"tasks": tasks})["tasks"])

    def get(self, task_id: str, *, wait: float | None = None) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/tasks/{task_id}", params=_wait_params(wait)))

    def cancel(self, task_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/tasks/{task_id}/cancel"))

    def agents(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/agents")["agents"])


class AsyncGatewayClient:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {api_key}"},
        )

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, float] | None = None,
    ) -> Any:
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                response = await self._http.request(method, path, json=json, params=params)
            except httpx.TransportError:
                if last or not _may_retry_network(method, json):
                    raise
                await anyio.sleep(self.retry.delay(attempt, None))
                continue
            if last or not _may_retry(response, json):
                return _result(response)
            await anyio.sleep(self.retry.delay(attempt, response))
        raise AssertionError("unreachable")  # pragma: no cover

    async def submit(
        self,
        intent: str,
        payload: dict[str, Any] | None = None,
        *,
        wait: float | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        body = _task_body(intent, payload, **fields)
        return dict(await self._call("POST", "/v1/tasks", json=body, params=_wait_params(wait)))

    async def submit_batch(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return list((await self._call("POST", "/v1/tasks/batch", json={"tasks": tasks}))["tasks"])

    async def get(self, task_id: str, *, wait: float | None = None) -> dict[str, Any]:
        return dict(await self._call("GET", f"/v1/tasks/{task_id}", params=_wait_params(wait)))

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return dict(await self._call("POST", f"/v1/tasks/{task_id}/cancel"))

    async def agents(self) -> list[dict[str, Any]]:
        return list((await self._call("GET", "/v1/agents"))["agents"])
