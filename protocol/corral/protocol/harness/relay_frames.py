"""The relay's frames: a harness agent's model calls sent over the session's own socket to the
client, which answers each from the trainer's engine (so the env host needs no route to it).

Only a client whose reset asked for it (`ResetData.llm == "relay"`) ever gets a `model_request`:

    server -> client   {"type": "model_request", "data": {"id": "r1", "body": {...chat completion...}}}
    client -> server   {"type": "model_response", "data": {"id": "r1", "status": 200, "body": {...}}}

`ModelRequest` is one of the server's frames (`frames.SERVER_FRAMES`); `ModelResponse` is read by
the socket's relay, never by the session, so it is not one of `frames.CLIENT_FRAMES`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MODEL_RESPONSE = "model_response"
MAX_ID_CHARS = 64


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRequestData(_Strict):
    """A model call for the client to send its engine as is (a chat completion, never streamed)."""

    id: str = Field(max_length=MAX_ID_CHARS)
    body: dict[str, Any]


class ModelRequest(_Strict):
    type: Literal["model_request"] = "model_request"
    data: ModelRequestData


class ModelResponseData(_Strict):
    """The engine's answer to the request `id`: its HTTP status and JSON body (an OpenAI error
    object when the engine could not be reached)."""

    id: str = Field(max_length=MAX_ID_CHARS)
    status: int = Field(ge=100, le=599)
    body: dict[str, Any]


class ModelResponse(_Strict):
    type: Literal["model_response"] = "model_response"
    data: ModelResponseData
