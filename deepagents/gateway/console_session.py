"""The console's session and its protections: the API key in a cookie scripts cannot read,
a per-key token on every form that changes something, a same-origin check, and the headers
every console page carries (a strict Content-Security-Policy among them)."""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import Request

from deepagents.errors import DeepAgentsError
from deepagents.gateway.auth import Authenticator, Principal
from deepagents.gateway.problems import Problem

COOKIE = "deepagents_console"
COOKIE_PATH = "/"  # the console and its own /ui paths; never sent to another host
MAX_KEY_CHARS = 512  # a key is ~47 characters; a cookie far longer is not one of ours

# No script, no frame, no plugin, no inline style, nothing from another host; forms post
# only to this origin. The console works without any script at all.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make a form's Origin "null"
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class SignedOut(DeepAgentsError):
    """No valid session: the page sends the browser to the sign-in form."""


def session_key(request: Request) -> str | None:
    key = request.cookies.get(COOKIE)
    return key if key and len(key) <= MAX_KEY_CHARS else None


def principal_of(request: Request, auth: Authenticator) -> tuple[Principal, str]:
    """The signed-in tenant and its key, or ``SignedOut``."""
    key = session_key(request)
    if key is None:
        raise SignedOut
    try:
        return auth.authenticate(f"Bearer {key}"), key
    except Problem:
        raise SignedOut from None


def csrf_token(key: str) -> str:
    """A form's token: derived from the session's key, so a page of another site (which
    cannot read the cookie) cannot make one; stateless, so a restart changes nothing."""
    return hmac.new(key.encode(), b"deepagents-console-form", hashlib.sha256).hexdigest()


def cookie_header(request: Request, key: str, *, max_age: int = 8 * 3600) -> str:
    secure = "; Secure" if request.url.scheme == "https" else ""
    return (
        f"{COOKIE}={key}; Path={COOKIE_PATH}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    )


def cleared_cookie_header(request: Request) -> str:
    return cookie_header(request, "", max_age=0)


def same_origin(request: Request) -> bool:
    """A browser names where a form was posted from (``Sec-Fetch-Site``, ``Origin``); a post
    from another site is refused whatever it carries."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True  # a browser that sends neither: the form's token still guards
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def form_allowed(request: Request, key: str, token: str | None) -> bool:
    return (
        same_origin(request) and token is not None and hmac.compare_digest(token, csrf_token(key))
    )
