"""Frames for tests that speak `/ws` directly: built and read with corral's protocol models,
never as hand-written dicts (a test that sends malformed text on purpose sends the text)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from websockets.sync.client import ClientConnection, connect

from corral.client.urls import ws_url
from corral.protocol.frames import (
    SERVER_FRAMES,
    CallTool,
    CallToolObservation,
    ErrorData,
    ErrorReply,
    JsonRpcRequest,
    JsonRpcResponse,
    ListTools,
    ListToolsObservation,
    McpReply,
    McpRequest,
    Observation,
    ObservationReply,
    ResetData,
    ResetObservation,
    ResetRequest,
    ServerFrame,
    StateReply,
    StateRequest,
    StepRequest,
)

ObservationT = TypeVar("ObservationT", bound=Observation)


def ws(server: Any, query: str = "") -> ClientConnection:
    """A raw socket on `server`'s `/ws` (an EmbeddedServer, or anything with a `url`)."""
    return connect(ws_url(server.url) + query, proxy=None)


def send(socket: ClientConnection, frame: BaseModel | str, timeout_s: float = 60) -> ServerFrame:
    """Send a frame (or raw text) and parse the reply."""
    socket.send(frame if isinstance(frame, str) else frame.model_dump_json())
    return SERVER_FRAMES.validate_json(socket.recv(timeout=timeout_s))


def receive(socket: ClientConnection, timeout_s: float = 60) -> ServerFrame:
    """The next frame the server sends (e.g. a refusal it sends unasked, then closes)."""
    return SERVER_FRAMES.validate_json(socket.recv(timeout=timeout_s))


def reset(**data: Any) -> ResetRequest:
    return ResetRequest(data=ResetData(**data))


def call(name: str, **arguments: Any) -> StepRequest:
    return StepRequest(data=CallTool(tool_name=name, arguments=arguments))


def list_tools() -> StepRequest:
    return StepRequest(data=ListTools())


def state() -> StateRequest:
    return StateRequest()


def mcp(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> McpRequest:
    return McpRequest(
        data=JsonRpcRequest(jsonrpc="2.0", method=method, params=params or {}, id=request_id).model_dump()
    )


def observed(reply: ServerFrame, model: type[ObservationT]) -> ObservationT:
    assert isinstance(reply, ObservationReply), reply
    return reply.data.parse(model)


def opened(socket: ClientConnection, **data: Any) -> ResetObservation:
    return observed(send(socket, reset(**data)), ResetObservation)


def called(socket: ClientConnection, name: str, **arguments: Any) -> CallToolObservation:
    return observed(send(socket, call(name, **arguments)), CallToolObservation)


def listed(socket: ClientConnection) -> ListToolsObservation:
    return observed(send(socket, list_tools()), ListToolsObservation)


def error_of(reply: ServerFrame) -> ErrorData:
    assert isinstance(reply, ErrorReply), reply
    return reply.data


def rpc(reply: ServerFrame) -> JsonRpcResponse:
    assert isinstance(reply, McpReply), reply
    return reply.data


def state_of(reply: ServerFrame):
    assert isinstance(reply, StateReply), reply
    return reply.data
