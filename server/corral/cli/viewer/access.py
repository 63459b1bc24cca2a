"""Who may read the viewer: with a token, only a request that carries it.

A run's records hold every prompt, transcript and token a model and an env wrote, so a viewer
that listens beyond loopback asks for the token `corral serve` takes (`cli.token`). A script
sends it as `Authorization: Bearer TOKEN`; a browser opens `/?token=TOKEN` once, is given it
as an HttpOnly cookie and sent to the same page without it, so the token leaves the address
bar, the history and every link's Referer.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse, RedirectResponse

_QUERY = "token"


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine alone (a name other than localhost may
    resolve anywhere, so it is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token(app: FastAPI, token: str) -> None:
    """Refuse every request of `app` without `token`: 401 when none is given, 403 for a wrong one."""

    @app.middleware("http")
    async def check(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        # Cookies are shared by every port of a host: one named by the port keeps two viewers' apart.
        cookie = f"corral_view_{request.url.port or 'default'}"
        given = request.query_params.get(_QUERY)
        if given is not None:
            if not _same(given, token):
                return _refused(403)
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != _QUERY])
            response: Response = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""), 303)
            response.set_cookie(cookie, token, httponly=True, samesite="strict")
            return response
        header = request.headers.get("authorization")
        if header is not None:  # whitespace around a field's value is not part of it (RFC 9110, 5.5)
            allowed = _same(header.strip(" \t"), f"Bearer {token}")
        elif (sent := request.cookies.get(cookie)) is not None:
            allowed = _same(sent, token)
        else:
            return _refused(401)
        return await call_next(request) if allowed else _refused(403)


def _same(given: str, token: str) -> bool:
    return secrets.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def _refused(status: int) -> Response:
    why = "this viewer wants its token" if status == 401 else "the token is wrong"
    return PlainTextResponse(
        f"{why}: open /?token=TOKEN once in the browser (the token corral view was given by --token-file "
        "or CORRAL_TOKEN), or send Authorization: Bearer TOKEN",
        status,
    )
