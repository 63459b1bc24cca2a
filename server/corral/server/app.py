"""The FastAPI app that serves one bundle: `/ws` sessions, the Task API, health and metadata."""

from __future__ import annotations

import secrets
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, WebSocket, WebSocketException
from starlette.requests import HTTPConnection

from corral.client.protocol import ResetData, TaskInfo, ToolSpec
from corral.server.served import ServedBundle
from corral.server.sessions import SessionRegistry
from corral.server.taskapi import task_router
from corral.server.ws import serve_socket


def create_app(served: ServedBundle) -> FastAPI:
    """An app serving `served` (see `ServedBundle.open`); shutting it down tears every episode down."""
    registry = SessionRegistry(served, served.options.max_concurrent_envs)
    token = served.options.token

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        served.start_pools()
        yield
        await registry.close_all()
        await served.aclose()

    def authorize(connection: HTTPConnection) -> None:
        if token is None or _bearer_matches(connection.headers.get("authorization"), token):
            return
        message = "missing or wrong bearer token; send Authorization: Bearer <token>"
        if connection.scope["type"] == "websocket":
            raise WebSocketException(code=1008, reason=message)
        raise HTTPException(401, message)

    app = FastAPI(title=f"corral: {served.name}", lifespan=lifespan, dependencies=[Depends(authorize)])
    app.state.registry = registry
    app.state.served = served

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "healthy", "sessions": len(registry.sessions), "max_sessions": registry.limit}

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
            "sandbox": served.provider.name,
            "max_concurrent_envs": registry.limit,
            "tool_timeout_s": served.tool_timeout_s,
            "reset_timeout_s": served.reset_timeout_s,
        }

    @app.get("/schema")
    def schema() -> dict[str, Any]:
        return {
            "action": {"oneOf": [{"type": "object", "properties": {"type": {"const": "list_tools"}}},
                                 {"type": "object", "properties": {"type": {"const": "call_tool"},
                                  "tool_name": {"type": "string"}, "arguments": {"type": "object"}}}]},
            "reset": ResetData.model_json_schema(),
            "task": TaskInfo.model_json_schema(),
            "tool": ToolSpec.model_json_schema(by_alias=True),
        }

    app.include_router(task_router(served))

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await serve_socket(websocket, registry)

    return app


def _bearer_matches(header: str | None, token: str) -> bool:
    return header is not None and secrets.compare_digest(header, f"Bearer {token}")
