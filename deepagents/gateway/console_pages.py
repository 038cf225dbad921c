"""The console's pages as HTML, rendered on the server: every value escaped, no script, one
stylesheet of the gateway's own (``static/console.css``)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import orjson

from deepagents.contract.inbox import Inbox, InboxAction
from deepagents.gateway.console_forms import FormField, render_fields
from deepagents.gateway.questions import encode_cursor
from deepagents.store.audit.task_events import TaskEvent
from deepagents.store.rollout_state import RolloutState
from deepagents.store.webhooks import EndpointStatus
from deepagents.transport.base import Waiting, WaitingCursor, now_ms

NAV = (("inbox", "/ui/inbox", "Inbox"), ("queues", "/ui/queues", "Queues"))
# Columns of an audit event a timeline row shows, when the event has them.
_TIMELINE = (
    "attempt", "deliveries", "status", "error_code", "error", "reason", "model",
    "latency_ms", "queue_ms", "tokens_used", "cost_usd",
)  # fmt: skip


def e(value: object) -> str:
    return html.escape(str(value))


def layout(title: str, body: str, *, tenant: str | None, csrf: str = "", refresh_s: int = 0) -> str:
    nav = ""
    if tenant is not None:
        links = "".join(f'<a href="{href}">{label}</a>' for _, href, label in NAV)
        nav = (
            f'<nav>{links}<span class="tenant">tenant {e(tenant)}</span>'
            f'<form method="post" action="/ui/logout"><input type="hidden" name="csrf" '
            f'value="{e(csrf)}"><button type="submit">Sign out</button></form></nav>'
        )
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)} · deepagents</title>{refresh}"
        '<link rel="stylesheet" href="/ui/static/console.css"></head>'
        f"<body><header><strong>deepagents</strong> console</header>{nav}"
        f"<main><h1>{e(title)}</h1>{body}</main></body></html>"
    )


def sign_in(error: str = "") -> str:
    shown = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    body = (
        f'{shown}<form method="post" action="/ui/login" class="card">'
        '<label for="key">API key</label>'
        '<input id="key" name="key" type="password" autocomplete="off" required>'
        '<button type="submit">Sign in</button></form>'
        "<p>The key your operator issued (<code>deepagents gateway --new-key TENANT</code>). "
        "It is kept in a cookie this page's scripts cannot read, for this site only.</p>"
    )
    return layout("Sign in", body, tenant=None)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _age(ms: int) -> str:
    seconds = max(0, now_ms() - ms) // 1000
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min"


@dataclass(frozen=True, slots=True)
class InboxSpot:
    """Which page of the inbox: its order, its size, and where it starts (after a place)
    or ends (before one); with neither, the first page."""

    newest: bool
    size: int
    after: WaitingCursor | None = None
    before: WaitingCursor | None = None


def _inbox_link(spot: InboxSpot, **place: WaitingCursor) -> str:
    query = {"order": "newest" if spot.newest else "oldest", "limit": str(spot.size)}
    query |= {k: encode_cursor(v) for k, v in place.items()}
    return "/ui/inbox?" + urlencode(query)


def inbox(
    tenant: str,
    csrf: str,
    waiting: list[Waiting],
    spot: InboxSpot,
    total: int,
    earlier: WaitingCursor | None,
    later: WaitingCursor | None,
) -> str:
    """One page of the tenant's open questions, with links to the pages around it."""
    oldest, newest = (e(_inbox_link(InboxSpot(n, spot.size))) for n in (False, True))
    order = (
        f'<p>Order: <a href="{oldest}">oldest first</a> · <a href="{newest}">newest first</a></p>'
    )
    links = []
    if earlier is not None:
        links.append(f'<a rel="prev" href="{e(_inbox_link(spot, before=earlier))}">previous</a>')
    if later is not None:
        links.append(f'<a rel="next" href="{e(_inbox_link(spot, after=later))}">next</a>')
    paging = f'<p class="paging">{" · ".join(links)}</p>' if links else ""
    shown = "newest" if spot.newest else "oldest"
    summary = f'<p><span data-total="{total}">{total}</span> waiting, {shown} first.</p>'
    if not waiting:
        return layout(
            "Inbox",
            order + summary + "<p>No question is waiting for you here.</p>" + paging,
            tenant=tenant,
            csrf=csrf,
        )
    rows = "".join(
        f'<tr data-task="{e(w.task_id)}"><td><a href="/ui/tasks/{e(w.task_id)}">{e(w.question)}</a>'
        f"</td><td>{e(w.agent)}</td><td>{_age(w.asked_ms)}</td><td>{_when(w.due_ms)}</td>"
        f"<td>{e(w.on_timeout)}</td><td><code>{e(w.task_id)}</code></td></tr>"
        for w in waiting
    )
    table = (
        "<table><thead><tr><th>question</th><th>agent</th><th>waiting</th><th>times out</th>"
        f"<th>then</th><th>task</th></tr></thead><tbody>{rows}</tbody></table>"
    )
    return layout("Inbox", order + summary + table + paging, tenant=tenant, csrf=csrf)


def _row(event: TaskEvent) -> str:
    data = event.data
    raw = data.get("detail")
    detail: dict[str, Any] = raw if isinstance(raw, dict) else {}
    facts = [f"{k}={data[k]}" for k in _TIMELINE if k in data]
    facts += [f"{k}={detail[k]}" for k in ("step", "phase", "ask", "question") if k in detail]
    return (
        f'<tr data-event="{e(event.type)}"><td>{e(data.get("ts", ""))}</td>'
        f"<td>{e(event.type)}</td><td>{e(' '.join(map(str, facts)))}</td></tr>"
    )


def _trace_id(events: list[TaskEvent]) -> str | None:
    for event in events:
        if event.data.get("trace_id"):
            return str(event.data["trace_id"])
    return None


def task_page(
    *,
    tenant: str,
    csrf: str,
    task_id: str,
    info: dict[str, Any],
    question: dict[str, Any] | None,
    fields: list[FormField],
    values: dict[str, str],
    errors: dict[str, str],
    notice: str,
    events: list[TaskEvent],
    result: dict[str, Any] | None,
    events_recorded: bool,
    dead_letter: str | None = None,
    inbox: Inbox | None = None,
) -> str:
    state = str(info.get("state") or "unknown")
    facts = [
        ("state", state),
        ("agent", info.get("agent")),
        ("tier", info.get("tier") or info.get("submitted_tier")),
        ("shard", info.get("shard")),
        ("attempt", info.get("attempt")),
        ("trace id", _trace_id(events)),
    ]
    dl = "".join(
        f'<dt>{e(k)}</dt><dd data-fact="{e(k)}">{e(v)}</dd>'
        for k, v in facts
        if v not in (None, "")
    )
    parts = [f'<p class="notice" role="status">{e(notice)}</p>' if notice else ""]
    parts.append(f'<dl class="card">{dl}</dl>')
    if question is not None and inbox is not None:
        parts.append(_inbox_question(task_id, csrf, question, inbox, fields, values, errors))
    elif question is not None:
        parts.append(
            f'<section class="card question"><h2>Question</h2><p>{e(question["question"])}</p>'
            f'<form method="post" action="/ui/tasks/{e(task_id)}/reply">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="ask" value="{e(question["ask"])}">'
            f"{render_fields(fields, values, errors)}"
            '<button type="submit" name="action" value="respond">Send the answer</button>'
            "</form></section>"
        )
    if state in ("queued", "scheduled", "running", "retrying", "waiting"):  # not ended yet
        parts.append(
            f'<form method="post" action="/ui/tasks/{e(task_id)}/cancel" class="actions">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            '<button type="submit" class="danger">Cancel the task</button></form>'
        )
    if dead_letter is not None:
        parts.append(
            f'<form method="post" action="/ui/tasks/{e(task_id)}/replay" class="actions">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="entry" value="{e(dead_letter)}">'
            '<button type="submit">Replay from the dead-letter stream</button></form>'
        )
    if result is not None:
        parts.append(
            '<section class="card"><h2>Result</h2><pre data-result>'
            f"{e(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())}</pre></section>"
        )
    if events:
        rows = "".join(_row(ev) for ev in events)
        parts.append(
            "<section><h2>Timeline</h2><table><thead><tr><th>time</th><th>event</th>"
            f"<th>details</th></tr></thead><tbody>{rows}</tbody></table></section>"
        )
    elif not events_recorded:
        parts.append(
            "<p>This deployment records no audit events (DEEPAGENTS_OUTBOX is off): "
            "no timeline.</p>"
        )
    refresh = 2 if state in ("queued", "running", "retrying") else 0
    return layout(f"Task {task_id}", "".join(parts), tenant=tenant, csrf=csrf, refresh_s=refresh)


RESPONSE = ":response"  # the respond form's text: no schema field can be named so
_LABELS = {
    InboxAction.ACCEPT: "Accept",
    InboxAction.EDIT: "Save the edit",
    InboxAction.RESPOND: "Send the response",
    InboxAction.IGNORE: "Ignore",
}


def _inbox_question(
    task_id: str,
    csrf: str,
    question: dict[str, Any],
    inbox: Inbox,
    fields: list[FormField],
    values: dict[str, str],
    errors: dict[str, str],
) -> str:
    """A question with actions: the proposal, then one form per action it allows."""

    def form(action: InboxAction, inner: str = "") -> str:
        css = ' class="danger"' if action is InboxAction.IGNORE else ""
        return (
            f'<form method="post" action="/ui/tasks/{e(task_id)}/reply" '
            f'data-action="{action.value}"><input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="ask" value="{e(question["ask"])}">'
            f'<input type="hidden" name="action" value="{action.value}">{inner}'
            f'<button type="submit"{css}>{_LABELS[action]}</button></form>'
        )

    asked = e(question["question"])
    parts = [f'<section class="card question" data-inbox><h2>Question</h2><p>{asked}</p>']
    if inbox.proposal is not None:
        shown = orjson.dumps(inbox.proposal, option=orjson.OPT_INDENT_2).decode()
        parts.append(f"<h3>Proposed</h3><pre data-proposal>{e(shown)}</pre>")
    if InboxAction.ACCEPT in inbox.actions:
        parts.append(form(InboxAction.ACCEPT))
    if InboxAction.EDIT in inbox.actions:
        parts.append(
            "<h3>Edit</h3>" + form(InboxAction.EDIT, render_fields(fields, values, errors))
        )
    if InboxAction.RESPOND in inbox.actions:
        error = errors.get(RESPONSE)
        shown_error = f'<p class="error" data-error="response">{e(error)}</p>' if error else ""
        text = (
            f'<div class="field{" invalid" if error else ""}"><label for="response">'
            "Respond in words instead</label>"
            f'<textarea id="response" name="response" rows="3">{e(values.get(RESPONSE, ""))}'
            f"</textarea>{shown_error}</div>"
        )
        parts.append("<h3>Respond</h3>" + form(InboxAction.RESPOND, text))
    if InboxAction.IGNORE in inbox.actions:
        parts.append(form(InboxAction.IGNORE))
    return "".join(parts) + "</section>"


def _rollouts(rollouts: list[RolloutState]) -> str:
    if not rollouts:
        return "<h2>Rollouts</h2><p>No rollout is running.</p>"
    body = "".join(
        f'<tr data-rollout="{e(r.agent)}"><td>{e(r.agent)}</td><td>{e(r.stable)}</td>'
        f"<td>{e(r.canary or '')}</td><td>{r.weight:.0%}</td><td>{e(r.phase)}</td>"
        f"<td>{e(r.reason)}</td></tr>"
        for r in rollouts
    )
    return (
        "<h2>Rollouts</h2><table><thead><tr><th>agent</th><th>stable</th><th>canary</th>"
        f"<th>canary weight</th><th>phase</th><th>last decision</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _webhooks(statuses: list[EndpointStatus]) -> str:
    """The endpoints told of this tenant's tasks: a dead one shows since when and why."""
    if not statuses:
        return "<h2>Webhooks</h2><p>No webhook is configured for your tasks.</p>"
    rows = []
    for s in statuses:
        failing = s.failing_s()
        if failing:
            health = (
                f'<td class="error">failing for {failing:.0f} s ({s.attempts} attempts)</td>'
                f"<td>{e(s.error or '')}</td>"
            )
        else:
            health = "<td>ok</td><td></td>"
        last = _when(s.delivered_ms) if s.delivered_ms else "never"
        rows.append(
            f'<tr data-webhook="{e(s.endpoint)}"><td>{e(s.endpoint)}</td>{health}'
            f"<td>{s.backlog}</td><td>{e(last)}</td></tr>"
        )
    return (
        "<h2>Webhooks</h2><table><thead><tr><th>endpoint</th><th>state</th><th>last error</th>"
        f"<th>backlog</th><th>last delivery</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def queues(
    tenant: str,
    csrf: str,
    rows: list[dict[str, Any]],
    workers: dict[str, int],
    rollouts: list[RolloutState],
    webhooks: list[EndpointStatus],
) -> str:
    cols = (
        "agent", "version", "tier", "shard", "length", "pending", "lag",
        "oldest_pending_ms", "dead_letters", "delayed",
    )  # fmt: skip
    head = "".join(f"<th>{e(c.replace('_', ' '))}</th>" for c in cols) + "<th>live workers</th>"
    body = "".join(
        "<tr>"
        + "".join(f"<td>{e(r.get(c, '') if r.get(c) is not None else '')}</td>" for c in cols)
        + f"<td>{workers.get(str(r.get('agent')), 0)}</td></tr>"
        for r in rows
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    body = table + _rollouts(rollouts) + _webhooks(webhooks)
    return layout("Queues", body, tenant=tenant, csrf=csrf, refresh_s=5)


def message(title: str, text: str, *, tenant: str | None, csrf: str = "") -> str:
    return layout(title, f'<p class="error" role="alert">{e(text)}</p>', tenant=tenant, csrf=csrf)
