"""The trainer's engine, as the client reaches it to answer a harness agent's model calls that
the server relays over the session's socket (relay mode: the env host needs no route to it).

    session = Session("http://env-host:8000", llm_url="http://gpu-box:8000", llm_model="Qwen/Qwen3-0.6B")

Each `model_request` body goes to the engine's OpenAI chat route as the server sent it (never
streamed: the server asked for the token ids it captures), with the engine's model name when
one is given; the engine's status and JSON come back as the `model_response`.
"""

from __future__ import annotations

from typing import Any

import httpx

from corral.protocol.harness.relay_frames import ModelRequestData, ModelResponse, ModelResponseData

TIMEOUT_S = 600.0  # the server gives up on a call first (its relay's timeout): this only bounds a hung engine


class RelayEngine:
    """An OpenAI-compatible engine at `url` (its root, as vLLM serves it; a trailing /v1 is fine);
    `model`: the name it serves, sent whatever name the agent used."""

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http: httpx.AsyncClient | None = None  # made on the session's loop, at the first call

    async def answer(self, request: ModelRequestData) -> ModelResponse:
        body = request.body if self.model is None else {**request.body, "model": self.model}
        if self._http is None:
            self._http = httpx.AsyncClient(
                trust_env=False, timeout=TIMEOUT_S, limits=httpx.Limits(max_connections=None)
            )
        status, reply = await self._post(body)
        return ModelResponse(data=ModelResponseData(id=request.id, status=status, body=reply))

    async def _post(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        assert self._http is not None
        try:
            answer = await self._http.post(f"{self.url}/v1/chat/completions", json=body, headers=self._headers)
        except httpx.HTTPError as error:
            return 502, _error(f"the engine at {self.url} (the client's llm_url) did not answer: {error!r}")
        try:
            reply = answer.json()
        except ValueError:
            return 502, _error(f"the engine at {self.url} answered {answer.status_code} without JSON")
        if not isinstance(reply, dict):
            return 502, _error(f"the engine at {self.url} answered {answer.status_code} with JSON that is no object")
        return answer.status_code, reply

    async def aclose(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "corral_relay", "code": "upstream_unreachable"}}
