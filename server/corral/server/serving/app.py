"""The FastAPI app that serves one bundle: `/ws` sessions, `POST /mcp`, the Task API, health,
metadata and schema, every route behind the bearer token when one is set."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, WebSocket
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse, Response

from corral.protocol import surrogates
from corral.protocol.frames import schemas
from corral.server.serving.mcp import answer_mcp, parse_error, session_named
from corral.server.serving.served import ServedBundle
from corral.server.serving.sessions import SessionRegistry
from corral.server.serving.taskapi import task_router
from corral.server.serving.ws import serve_socket
from corral.server.workers.forward import Forwarder
from corral.server.workers.metrics import OWN_ONLY, peers_metrics, summed
from corral.server.workers.seat import WorkerSeat

OPENENV_HTTP_VERSION = "1.0.0"  # the OpenEnv HTTP profile the routes follow (openenv validate reads it)
WS_QUEUE_FRAMES = 4  # frames uvicorn reads ahead of a session; past them the socket's reading waits


def socket_settings(served: ServedBundle) -> dict[str, Any]:
    """uvicorn's WebSocket settings for serving `served`: its frame size limit, and a short
    read-ahead, so a client flooding frames during a call holds little of the server's memory.
    No compression: uvicorn queues every message of a chunk it reads before it pauses reading,
    and a chunk of compressed frames (1 KB each on the wire) expanded to a megabyte each held
    250 MB at once."""
    return {
        "ws_max_size": served.options.max_frame_bytes,
        "ws_max_queue": WS_QUEUE_FRAMES,
        "ws_per_message_deflate": False,
    }


def create_app(served: ServedBundle, seat: WorkerSeat | None = None) -> FastAPI:
    """An app serving `served` (see `ServedBundle.open`); shutting it down tears every episode down.
    `seat`: this process is one worker of several (workers.py), whose session limit is the host's."""
    registry = SessionRegistry(served, served.options.max_concurrent_envs, seat)
    served.metrics.count_sessions(lambda: len(registry.sessions))
    forwarder = Forwarder(seat) if seat is not None else None
    app = FastAPI(
        title=f"corral: {served.name}",
        version=OPENENV_HTTP_VERSION,
        lifespan=_lifespan(served, registry, seat, forwarder),
        dependencies=[Depends(_authorizer(served.options.token))],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.registry = registry
    app.state.served = served
    _add_docs_routes(app)
    _add_status_routes(app, served, registry, seat, forwarder)
    _add_description_routes(app, served, registry)
    _add_mcp_route(app, registry, forwarder)
    app.include_router(task_router(served))
    _add_socket_route(app, registry, forwarder, served.options.token)
    return app


def _lifespan(
    served: ServedBundle, registry: SessionRegistry, seat: WorkerSeat | None, forwarder: Forwarder | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the pools before the first request; at shutdown close every session, then the bundle."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await served.start_pools()  # uvicorn accepts no request until this returns
        registry.start_reaping()
        if seat is not None:
            seat.serving()
        yield
        await registry.close_all()
        await served.aclose()
        if forwarder is not None:
            await forwarder.aclose()

    return lifespan


def _authorizer(token: str | None) -> Callable[[HTTPConnection], None]:
    """Every HTTP route's dependency: refuse a request without the bearer token (the WebSocket
    route refuses its own, with a denial response)."""

    def authorize(connection: HTTPConnection) -> None:
        if connection.scope["type"] == "http" and (refusal := _refusal(connection, token)):
            raise HTTPException(*refusal)

    return authorize


def _add_docs_routes(app: FastAPI) -> None:
    """The API's own description: the OpenAPI schema and its two readers, behind the token."""

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=app.title)

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=app.title)


def _add_status_routes(
    app: FastAPI, served: ServedBundle, registry: SessionRegistry, seat: WorkerSeat | None, forwarder: Forwarder | None
) -> None:
    """How the server is doing, for operators: /health and Prometheus' /metrics (the host's, summed
    over its workers)."""

    @app.get("/health")
    async def health() -> dict[str, Any]:  # on the loop: the provider's state is the loop's
        sandbox = served.provider.status()
        workers = {} if seat is None else {"worker": seat.index, "workers": seat.workers()}
        return {
            "status": "healthy",
            "sessions": registry.active(),
            "max_sessions": registry.limit,
            # This process's sandboxes: with several workers, the answering one's (see "worker").
            "sandbox": {"kind": sandbox.kind, "isolated": sandbox.isolated, "live": sandbox.live, "warm": sandbox.warm},
            **workers,
        }

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:  # on the loop, as /health: the gauges read the provider's state
        own = served.metrics.render()
        if seat is None or forwarder is None or OWN_ONLY in request.headers:
            return Response(own, media_type=CONTENT_TYPE_LATEST)
        peers = await peers_metrics(seat, forwarder, request.headers.get("authorization"))
        return Response(summed([own.decode(), *peers]), media_type=CONTENT_TYPE_LATEST)


def _add_description_routes(app: FastAPI, served: ServedBundle, registry: SessionRegistry) -> None:
    """What OpenEnv's clients read of the environment before they play: /metadata and /schema."""

    @app.get("/metadata")
    def metadata() -> dict[str, Any]:
        manifest = served.bundle.manifest
        return {
            "name": manifest.name,
            "description": manifest.description,
            "version": manifest.version,
            "readme_content": served.bundle.readme or None,
            "author": None,
            "documentation_url": None,
            "sandbox": served.provider.kind,
            "max_concurrent_envs": registry.limit,
            "fork_modes": served.fork_modes(),  # {env: mode}: corral/episode/fork (docs/protocol.md)
            **served.limits.model_dump(),  # a client may ask for lower limits, never higher
        }

    @app.get("/schema")
    def schema() -> dict[str, Any]:
        return schemas()


def _add_mcp_route(app: FastAPI, registry: SessionRegistry, forwarder: Forwarder | None) -> None:
    """POST /mcp: sessions played over HTTP, one JSON-RPC request at a time."""

    @app.post("/mcp")
    async def mcp(request: Request) -> Response:
        """JSON-RPC 2.0 (always HTTP 200, as OpenEnv answers): see corral.server.serving.mcp. A request for
        a session another worker holds is answered by that worker (workers.forward)."""
        raw = await request.body()
        try:
            body = surrogates.loads(raw)
        except (ValueError, RecursionError) as error:
            return JSONResponse(parse_error(error).model_dump(mode="json"))
        if forwarder is not None and (forwarded := await forwarder.post(session_named(body), request, raw)):
            return forwarded
        return JSONResponse((await answer_mcp(body, registry)).model_dump(mode="json"))


def _add_socket_route(app: FastAPI, registry: SessionRegistry, forwarder: Forwarder | None, token: str | None) -> None:
    """/ws: a session on a WebSocket (serving.ws), refused before its upgrade without the token."""

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        if refusal := _refusal(websocket, token):
            status, message = refusal
            await websocket.send_denial_response(JSONResponse({"detail": message}, status_code=status))
            return
        if forwarder is None or not await forwarder.socket(websocket):  # a session another worker holds
            await serve_socket(websocket, registry)


def _refusal(connection: HTTPConnection, token: str | None) -> tuple[int, str] | None:
    """(status, why) when the request lacks the right bearer token: 401 without one, 403 with
    a wrong one; None when it may pass."""
    if token is None:
        return None
    header = connection.headers.get("authorization")
    if header is None:
        return 401, "this server wants a bearer token: send Authorization: Bearer <token>"
    # Whitespace around a field value is not part of it (RFC 9110, 5.5); HTTP parsers differ in
    # whether they strip it (httptools 0.9 does), so the check does not depend on which one runs.
    value = header.strip(" \t").encode("utf-8", "surrogateescape")
    if not secrets.compare_digest(value, f"Bearer {token}".encode()):
        return 403, "the bearer token is wrong: send the token the server was started with"
    return None
