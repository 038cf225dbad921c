"""The console in a real browser (Debian's Chromium) against a real gateway and worker: sign
in, see a waiting question, answer it through the form generated from its schema, watch the
task finish in the inspector; a wrong answer shows the schema's error on its field; a second
tab's answer is refused clearly; another tenant's task is neither listed nor reachable; no
page works without a key; a form posted from another site changes nothing; every page has
the CSP header; no request leaves for another host. Screenshots go to docs/console/."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis as AsyncRedis

from deepagents._internal.redis_server import free_port
from deepagents.config import load_config
from deepagents.gateway.console_session import CSP
from deepagents.store.webhooks import Delivery, WebhookDispatcher, WebhookQueue
from deepagents.transport.keys import Keys
from tests.console.conftest import HOOK_SECRET_ENV, SHOTS
from tests.gateway.conftest import Deployment
from tests.gateway.procs import KEYS, Gateway, auth
from tests.support.wait import eventually_sync

TIMEOUT_MS = 60_000


def _ask(
    api: httpx.Client, runs: Path, tenant: str = "alpha", item: str = "order 9", **more: Any
) -> str:
    body = {"intent": "approve", "payload": {"runs": str(runs), "item": item, **more}}
    r = api.post("/v1/tasks", json=body, headers=auth(tenant))
    assert r.status_code == 202, r.text
    task_id = str(r.json()["task_id"])

    def waiting() -> bool:
        return bool(
            api.get(f"/v1/tasks/{task_id}", headers=auth(tenant)).json()["state"] == "waiting"
        )

    eventually_sync(waiting, timeout=60, what="the task waits for a reply")
    return task_id


def _state(api: httpx.Client, task_id: str, tenant: str = "alpha") -> str:
    return str(api.get(f"/v1/tasks/{task_id}", headers=auth(tenant)).json()["state"])


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1200, "height": 800})
    ctx.set_default_timeout(TIMEOUT_MS)
    try:
        yield ctx
    finally:
        ctx.close()


def _sign_in(context: Any, gateway: Gateway, tenant: str = "alpha") -> Any:
    page = context.new_page()
    page.goto(gateway.url + "/ui")
    page.fill("#key", KEYS[tenant])
    page.click("button[type=submit]")
    page.wait_for_url(gateway.url + "/ui/inbox")
    return page


def _answer(page: Any, approved: str, note: str) -> None:
    page.select_option("select[name='f.approved']", approved)
    page.fill("input[name='f.note']", note)
    page.click("text=Send the answer")


def test_sign_in_answer_through_the_form_and_watch_the_task_finish(
    context: Any, gateway: Gateway, api: httpx.Client, tmp_path: Path
) -> None:
    signin = context.new_page()
    signin.goto(gateway.url + "/ui")
    signin.screenshot(path=str(SHOTS / "sign-in.png"))
    signin.close()
    task_id = _ask(api, tmp_path / "runs", item="invoice 42")
    page = _sign_in(context, gateway)
    row = page.locator(f"tr[data-task='{task_id}']")
    assert "approve invoice 42?" in row.inner_text()
    cookie = next(c for c in context.cookies() if c["name"] == "deepagents_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # scripts cannot read the session
    page.screenshot(path=str(SHOTS / "inbox.png"), full_page=True)
    row.locator("a").click()
    page.wait_for_url(f"{gateway.url}/ui/tasks/{task_id}")
    assert page.locator("[data-fact='state']").inner_text() == "waiting"
    page.screenshot(path=str(SHOTS / "question.png"), full_page=True)
    _answer(page, "true", "looks right")
    page.wait_for_url(f"{gateway.url}/ui/tasks/{task_id}?done=replied")
    # The page refreshes itself while the task is queued or running.
    page.locator("[data-fact='state']", has_text="done").wait_for()
    result = page.locator("[data-result]").inner_text()
    assert '"approved": true' in result and '"note": "looks right"' in result
    timeline = [row.get_attribute("data-event") for row in page.locator("tr[data-event]").all()]
    assert timeline[0] == "submitted" and timeline[-1] == "succeeded"
    assert "waiting" in timeline and "replied" in timeline
    assert page.locator("[data-fact='trace id']").count() in (0, 1)
    page.screenshot(path=str(SHOTS / "task.png"), full_page=True)
    page.goto(gateway.url + "/ui/queues")
    assert "approver" in page.locator("table").first.inner_text()
    rollout = page.locator("tr[data-rollout='escalations']").inner_text()
    assert "1.0.0" in rollout and "1.1.0" in rollout and "20%" in rollout
    page.screenshot(path=str(SHOTS / "queues.png"), full_page=True)


def test_a_dead_letter_is_replayed_from_the_inspector(
    context: Any, gateway: Gateway, api: httpx.Client, lab_worker: Any
) -> None:
    r = api.post("/v1/tasks", json={"intent": "lab", "payload": {"fail": True}}, headers=auth())
    assert r.status_code == 202, r.text
    task_id = str(r.json()["task_id"])
    eventually_sync(lambda: _state(api, task_id) == "dead", timeout=60, what="dead-lettered")
    page = _sign_in(context, gateway)
    page.goto(f"{gateway.url}/ui/tasks/{task_id}")
    assert page.locator("tr[data-event='dead_lettered']").count() == 1
    page.click("text=Replay from the dead-letter stream")
    page.wait_for_url(f"{gateway.url}/ui/tasks/{task_id}?done=replayed")
    assert "Replayed" in page.locator(".notice").inner_text()

    def replayed_and_dead_again() -> bool:
        """Run again from its queue (two more deliveries) and dead-lettered a second time,
        with its Replay button back. The page reads the task's state before its events, so
        one render can show the second dead letter in the timeline and the state before it
        (no button yet); the next shows both."""
        page.reload()
        events = [r.get_attribute("data-event") for r in page.locator("tr[data-event]").all()]
        again = events.count("dead_lettered") == 2 and events.count("started") == 4
        return again and page.locator("text=Replay from the dead-letter stream").count() == 1

    eventually_sync(replayed_and_dead_again, timeout=60, what="the replay ran")


def test_a_wrong_answer_shows_the_schema_s_error_on_its_field(
    context: Any, gateway: Gateway, api: httpx.Client, tmp_path: Path
) -> None:
    task_id = _ask(api, tmp_path / "runs")
    page = _sign_in(context, gateway)
    page.goto(f"{gateway.url}/ui/tasks/{task_id}")
    _answer(page, "false", "x" * 201)  # the schema: note has maxLength 200
    error = page.locator("[data-error='note']")
    assert "too long" in error.inner_text()
    assert page.locator("input[name='f.note']").input_value() == "x" * 201  # kept to fix
    assert _state(api, task_id) == "waiting"  # nothing applied
    _answer(page, "false", "short")
    page.wait_for_url(f"{gateway.url}/ui/tasks/{task_id}?done=replied")


def test_a_second_tab_s_answer_is_refused_clearly(
    context: Any, gateway: Gateway, api: httpx.Client, tmp_path: Path
) -> None:
    task_id = _ask(api, tmp_path / "runs")
    first = _sign_in(context, gateway)
    second = context.new_page()
    for tab in (first, second):
        tab.goto(f"{gateway.url}/ui/tasks/{task_id}")
    _answer(first, "true", "first tab")
    first.wait_for_url(f"{gateway.url}/ui/tasks/{task_id}?done=replied")
    _answer(second, "false", "second tab")
    notice = second.locator(".notice").inner_text()
    assert "answered already" in notice and "first answer stands" in notice
    assert second.locator("select[name='f.approved']").count() == 0  # shown as answered
    view = api.get(f"/v1/tasks/{task_id}?wait=30", headers=auth()).json()
    assert view["result"]["output"] == {"approved": True, "note": "first tab"}


def test_another_tenant_s_task_is_not_listed_and_its_page_is_404(
    context: Any, gateway: Gateway, api: httpx.Client, tmp_path: Path
) -> None:
    theirs = _ask(api, tmp_path / "runs", tenant="beta", item="beta's secret")
    page = _sign_in(context, gateway, "alpha")
    assert page.locator(f"tr[data-task='{theirs}']").count() == 0
    assert "beta's secret" not in page.content()
    answer = page.goto(f"{gateway.url}/ui/tasks/{theirs}")
    assert answer is not None and answer.status == 404
    assert "beta's secret" not in page.content()
    refused = page.request.post(
        f"{gateway.url}/ui/tasks/{theirs}/cancel", form={"csrf": "x"}, max_redirects=0
    )
    assert refused.status in (403, 404)
    assert _state(api, theirs, "beta") == "waiting"


def _rows(page: Any) -> list[str]:
    return [str(r.get_attribute("data-task")) for r in page.locator("tr[data-task]").all()]


def test_the_inbox_pages_through_every_question_once_and_back(
    context: Any, gateway: Gateway, api: httpx.Client, tmp_path: Path
) -> None:
    payloads = [{"runs": str(tmp_path / "runs"), "item": f"p{i}"} for i in range(12)]
    submitted = [
        api.post("/v1/tasks", json={"intent": "approve", "payload": p}, headers=auth("beta"))
        for p in payloads
    ]
    assert all(r.status_code == 202 for r in submitted)
    mine = [str(r.json()["task_id"]) for r in submitted]
    eventually_sync(
        lambda: all(_state(api, t, "beta") == "waiting" for t in mine),
        timeout=60,
        what="every task waits for a reply",
    )
    page = _sign_in(context, gateway, "beta")
    page.goto(gateway.url + "/ui/inbox?limit=5")
    pages = [_rows(page)]
    total = int(str(page.locator("[data-total]").get_attribute("data-total")))
    while page.locator("a[rel=next]").count():
        page.click("a[rel=next]")
        pages.append(_rows(page))
    seen = [t for p in pages for t in p]
    assert len(seen) == len(set(seen)) == total  # each once, and as many as the count says
    assert set(mine) <= set(seen) and len(pages) >= 3 and all(len(p) <= 5 for p in pages)
    for earlier in reversed(pages[:-1]):  # and back, page by page
        page.click("a[rel=prev]")
        assert _rows(page) == earlier
    assert page.locator("a[rel=prev]").count() == 0
    page.goto(gateway.url + "/ui/inbox?order=newest&limit=5")
    assert _rows(page) == seen[::-1][:5]
    for task_id in mine:
        r = api.post(
            f"/v1/tasks/{task_id}/reply", json={"answer": {"approved": True}}, headers=auth("beta")
        )
        assert r.status_code == 200, r.text


def test_a_dead_webhook_endpoint_shows_on_the_queues_page(
    context: Any, gateway: Gateway, deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real dispatcher (in a thread of this process) fails to reach alpha's endpoint;
    the Queues page shows it failing with its backlog, to alpha and not to beta."""
    monkeypatch.setenv(HOOK_SECRET_ENV, "whsec-console-test")
    config = load_config(deployment.config)
    keys = Keys(deployment.prefix)
    done = threading.Event()

    async def deliver() -> None:
        client = AsyncRedis.from_url(deployment.redis_url)
        try:
            await WebhookQueue(client, keys).enqueue([Delivery("alpha-hook", "evt-1", b"{}")])
            dispatcher = WebhookDispatcher(client, keys, config.webhooks, "console-test")
            running = asyncio.create_task(dispatcher.run())
            await asyncio.to_thread(done.wait)
            dispatcher.stop()
            await running
        finally:
            await client.aclose()

    thread = threading.Thread(target=asyncio.run, args=(deliver(),))
    thread.start()
    try:
        page = _sign_in(context, gateway)
        row = page.locator("tr[data-webhook='alpha-hook']")

        def failing() -> bool:
            page.goto(gateway.url + "/ui/queues")
            return "failing for" in row.inner_text()

        eventually_sync(failing, timeout=60, interval=0.5, what="the endpoint shows failing")
        cells = [c.inner_text() for c in row.locator("td").all()]
        assert cells[0] == "alpha-hook" and cells[3] == "1" and cells[4] == "never", cells
        assert cells[2]  # why: the connection's error
        page.screenshot(path=str(SHOTS / "queues-webhooks.png"), full_page=True)
        theirs = _sign_in(context.browser.new_context(), gateway, "beta")
        theirs.goto(gateway.url + "/ui/queues")
        assert theirs.locator("tr[data-webhook]").count() == 0
        theirs.context.close()
    finally:
        done.set()
        thread.join()


def test_no_page_or_api_works_without_a_key(browser: Any, gateway: Gateway) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        for path in ("/ui/inbox", "/ui/queues", "/ui/tasks/some-task"):
            page.goto(gateway.url + path)
            assert page.url == gateway.url + "/ui", path  # sent to sign in
            assert page.locator("#key").count() == 1
        for path in ("/v1/waiting", "/v1/agents", "/v1/tasks/some-task/events"):
            assert page.request.get(gateway.url + path).status == 401, path
        page.goto(gateway.url + "/ui")
        page.fill("#key", "dak_not-a-key")
        page.click("button[type=submit]")
        assert "not valid" in page.locator(".error").inner_text()
        assert ctx.cookies() == []
    finally:
        ctx.close()


class _Attacker(BaseHTTPRequestHandler):
    """Another site: a page whose form posts to the console (the task's cancel)."""

    target = ""

    def do_GET(self) -> None:
        body = (
            f'<html><body><form method="post" action="{self.target}">'
            '<input type="hidden" name="csrf" value="guessed">'
            '<button id="go" type="submit">win a prize</button></form></body></html>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def attacker() -> Iterator[tuple[str, type[_Attacker]]]:
    handler = type("Attacker", (_Attacker,), {})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # "localhost" is another origin (and another site) than the gateway's 127.0.0.1.
        yield f"http://localhost:{server.server_address[1]}/", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_cross_site_form_post_is_refused(
    context: Any,
    gateway: Gateway,
    api: httpx.Client,
    tmp_path: Path,
    attacker: tuple[str, type[_Attacker]],
) -> None:
    task_id = _ask(api, tmp_path / "runs")
    page = _sign_in(context, gateway)
    url, handler = attacker
    handler.target = f"{gateway.url}/ui/tasks/{task_id}/cancel"
    page.goto(url)
    with page.expect_navigation():
        page.click("#go")
    assert "Cancelled" not in page.content()
    assert _state(api, task_id) == "waiting"
    # Even with the session cookie and from the same origin, a form needs its token.
    posted = page.request.post(handler.target, form={"csrf": "guessed"}, max_redirects=0)
    assert posted.status == 403
    assert _state(api, task_id) == "waiting"


def test_every_page_has_the_csp_and_nothing_is_fetched_from_another_host(
    context: Any, gateway: Gateway, api: httpx.Client, tmp_path: Path
) -> None:
    task_id = _ask(api, tmp_path / "runs")
    requested: list[str] = []
    context.on("request", lambda request: requested.append(request.url))
    page = _sign_in(context, gateway)
    for path in (
        "/ui",
        "/ui/inbox",
        f"/ui/tasks/{task_id}",
        "/ui/queues",
        "/ui/tasks/nope",
        "/docs",
    ):
        answer = page.goto(gateway.url + path)
        assert answer is not None
        assert answer.headers.get("content-security-policy") == CSP, path
        assert answer.headers.get("x-frame-options") == "DENY", path
    page.goto(gateway.url + "/docs")
    assert "/v1/tasks/{task_id}/events" in page.content()
    page.screenshot(path=str(SHOTS / "docs.png"))
    assert requested, "the browser made no request"
    others = [u for u in requested if not u.startswith(gateway.url + "/")]
    assert others == [], others


def test_agent_inbox_actions_accept_edit_respond_and_ignore(
    context: Any, gateway: Gateway, api: httpx.Client, tmp_path: Path
) -> None:
    """A question that allows the four actions shows its proposal and one form per action;
    each gives the agent what the person did; a bad edit shows the schema's error on its
    field, an empty response is refused on the response."""
    every = ["accept", "edit", "respond", "ignore"]
    tasks = {a: _ask(api, tmp_path / "runs", item=f"refund {a}", actions=every) for a in every}
    page = _sign_in(context, gateway)

    def open_task(action: str) -> None:
        page.goto(f"{gateway.url}/ui/tasks/{tasks[action]}")
        assert '"note": "as drafted"' in page.locator("[data-proposal]").inner_text()

    def finished(action: str) -> dict[str, Any]:
        page.wait_for_url(f"{gateway.url}/ui/tasks/{tasks[action]}?done=replied")
        view = api.get(f"/v1/tasks/{tasks[action]}?wait=30", headers=auth()).json()
        return dict(view["result"]["output"])

    open_task("accept")
    assert page.locator("form[data-action]").count() == 4
    page.screenshot(path=str(SHOTS / "question-actions.png"), full_page=True)
    page.click("form[data-action='accept'] button")
    accepted = {"approved": True, "note": "as drafted"}
    assert finished("accept") == {"action": "accept", "value": accepted, "response": None}

    open_task("edit")
    edit = page.locator("form[data-action='edit']")
    assert edit.locator("input[name='f.note']").input_value() == "as drafted"
    edit.locator("input[name='f.note']").fill("x" * 300)
    edit.locator("button").click()
    assert "too long" in page.locator("[data-error='note']").inner_text()
    edit = page.locator("form[data-action='edit']")
    edit.locator("select[name='f.approved']").select_option("false")
    edit.locator("input[name='f.note']").fill("half only")
    edit.locator("button").click()
    edited = {"approved": False, "note": "half only"}
    assert finished("edit") == {"action": "edit", "value": edited, "response": None}

    open_task("respond")
    page.click("form[data-action='respond'] button")
    assert "write a response" in page.locator("[data-error='response']").inner_text()
    page.fill("#response", "call the customer first")
    page.click("form[data-action='respond'] button")
    said = "call the customer first"
    assert finished("respond") == {"action": "respond", "value": None, "response": said}

    open_task("ignore")
    page.click("form[data-action='ignore'] button")
    assert finished("ignore") == {"action": "ignore", "value": None, "response": None}
