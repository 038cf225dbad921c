"""``/docs``: the API reference as one HTML page rendered from the OpenAPI document, with
the document itself at ``/openapi.json``. It replaces FastAPI's Swagger page, which loads
its script and styles from a CDN: this page loads nothing from another host and runs no
script, under the console's Content-Security-Policy."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import HTMLResponse

from deepagents.gateway.console_pages import e, layout
from deepagents.gateway.console_session import SECURITY_HEADERS

router = APIRouter(include_in_schema=False)
_METHODS = ("get", "post", "put", "patch", "delete")


def _operation(path: str, method: str, op: dict[str, Any]) -> str:
    params = "".join(
        f"<li><code>{e(p.get('name'))}</code> ({e(p.get('in'))})"
        f"{' required' if p.get('required') else ''}: {e(p.get('description', ''))}</li>"
        for p in op.get("parameters", [])
        if p.get("name") != "Authorization"
    )
    answers = "".join(
        f"<li><code>{e(code)}</code> {e(r.get('description', ''))}</li>"
        for code, r in sorted(op.get("responses", {}).items())
    )
    return (
        f'<section class="card" id="{e(op.get("operationId", ""))}">'
        f"<h2><code>{e(method.upper())} {e(path)}</code></h2><p>{e(op.get('summary', ''))}</p>"
        + (f"<h3>Parameters</h3><ul>{params}</ul>" if params else "")
        + f"<h3>Answers</h3><ul>{answers}</ul></section>"
    )


def reference(document: dict[str, Any]) -> str:
    info = document.get("info", {})
    ops = [
        _operation(path, method, item[method])
        for path, item in document.get("paths", {}).items()
        for method in _METHODS
        if method in item
    ]
    intro = (
        f"<p>{e(info.get('description', ''))}</p>"
        '<p>The machine-readable document: <a href="/openapi.json">/openapi.json</a> '
        "(also committed as <code>docs/openapi.json</code>).</p>"
    )
    return layout(
        f"{info.get('title', 'API')} {info.get('version', '')}", intro + "".join(ops), tenant=None
    )


@router.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    return HTMLResponse(reference(request.app.openapi()), headers=SECURITY_HEADERS)
