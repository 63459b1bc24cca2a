"""A corral server's URL (or several env hosts'): checked once, in the form every route is built from."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from corral.errors import BadURL


def base_url(url: str) -> str:
    """`url` as the server's base (`http://host:8000`, no trailing slash); `BadURL` with the
    URL to pass instead when it names the WebSocket route or lacks its scheme."""
    stripped = url.strip().rstrip("/")
    parts = urlsplit(stripped)
    if parts.scheme in ("ws", "wss"):
        http = "https" if parts.scheme == "wss" else "http"
        raise BadURL(f"{url!r} is a WebSocket URL; pass the server's HTTP URL, e.g. {http}://{parts.netloc}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadURL(f"{url!r} has no http:// or https:// scheme; pass e.g. http://{stripped.split('://')[-1]}")
    if parts.path.endswith("/ws"):
        raise BadURL(
            f"{url!r} names the session route; pass the server's base URL, e.g. "
            f"{parts.scheme}://{parts.netloc}{parts.path.removesuffix('/ws')}"
        )
    return stripped


def ws_url(url: str) -> str:
    """`http://host:8000` -> `ws://host:8000/ws` (and https -> wss)."""
    scheme, rest = base_url(url).split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws"


def base_urls(urls: str | Sequence[str]) -> tuple[str, ...]:
    """One server's URL, or several env hosts' (a sequence, or one string separated by commas,
    as a command line or an environment variable gives them), each as `base_url` makes it."""
    given = urls.split(",") if isinstance(urls, str) else list(urls)
    found = tuple(dict.fromkeys(base_url(url) for url in given if url.strip()))
    if not found:
        raise BadURL(f"{urls!r} names no server; pass e.g. http://env-host:8000")
    return found
