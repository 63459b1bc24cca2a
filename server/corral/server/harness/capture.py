"""The capture proxy: the one way a harness episode's model calls reach the engine.

An agent in the sandbox reaches its episode's OpenAI-compatible route here
(`/episodes/<id>/v1/chat/completions`: the channel its sandbox has) with its episode's secret
key as its API key (another episode's key, or none: 401, as is a closed episode). Each call is
pinned to the training policy's sampling, capped in length, sent to the episode's upstream
without streaming, and kept with the engine's own token ids and logprobs
(`corral.protocol.harness.calls`); the agent gets the answer as JSON or, if it asked, as SSE. Past
the episode's step limit the proxy answers by itself with a stop message, counted, never
recorded. An engine that returns no ids lowers the capture's level (`text`: an eval episode),
with a warning in the log and the reason in the capture, never silently.

    proxy = CaptureProxy()
    episode = proxy.open_episode(HttpUpstream("http://gpu-box:8000", model="Qwen/Qwen3-0.6B"),
                                 episode_id=episode_id, temperature=1.0, max_calls=30)
    # the agent: OPENAI_BASE_URL=<proxy>/episodes/<episode_id>/v1 OPENAI_API_KEY=episode.key
    capture = proxy.close_episode(episode_id)   # a HarnessCapture

The upstream is an interface (`Upstream.complete`): direct over HTTP here; the relay over the
episode's WebSocket slots in beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from corral.errors import ConfigError
from corral.protocol.harness.calls import CaptureLevel, training_sampling, weakest
from corral.protocol.harness.capture import HarnessCapture
from corral.server.harness import sse as harness_sse
from corral.server.harness.request import (
    RequestRefused,
    agent_reply,
    budget_reply,
    captured_call,
    upstream_body,
)

log = logging.getLogger("corral.server")
MAX_TOKENS = 8192  # a call's output cap where the episode sets none
MAX_BODY_BYTES = 32 * 1024 * 1024  # a call's request body: a long agent context is a few MB; more is a flood
KEEPALIVE_S = 10.0  # a streaming agent waiting longer gets SSE comments, so its reader does not time out


class Upstream(Protocol):
    """Where an episode's calls are answered: `(status, reply)` for a non-streaming request body
    (`http` is the proxy's pooled client, for an upstream it reaches over HTTP)."""

    @property
    def model(self) -> str | None:
        """The served model's name, sent whatever name the agent uses; None: the agent's."""

    async def complete(self, body: dict[str, Any], http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]: ...


@dataclass(frozen=True)
class HttpUpstream:
    """An engine the server reaches itself (`llm_url`), vLLM's OpenAI server or one like it."""

    url: str
    model: str | None = None  # the served model's name, sent whatever name the agent uses
    api_key: str | None = None
    timeout_s: float = 600.0

    async def complete(self, body: dict[str, Any], http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = self.url.rstrip("/") + "/v1/chat/completions"
        try:
            answer = await http.post(url, json=body, headers=headers, timeout=self.timeout_s)
        except httpx.HTTPError as error:
            return 502, error_body(f"the engine at {self.url} did not answer: {error!r}", "upstream_unreachable")
        try:
            return answer.status_code, answer.json()
        except ValueError:
            return 502, error_body(
                f"the engine at {self.url} answered {answer.status_code} without JSON", "upstream_bad"
            )


@dataclass
class EpisodeCapture:
    """One episode's side of the proxy: its key, limits, upstream and what was captured."""

    episode_id: str  # for the log: the key is a secret
    key: str
    upstream: Upstream
    sampling: dict[str, Any]
    max_calls: int  # model calls the engine answers; 0 = no limit
    max_tokens: int
    capture: HarnessCapture = field(default_factory=HarnessCapture)
    started: int = 0  # calls sent upstream and not failed: what the step limit counts

    def note_level(self, call_level: CaptureLevel, problems: list[str]) -> None:
        level = weakest(self.capture.level, call_level)
        new = [problem for problem in problems if problem not in self.capture.problems]
        if new:
            log.warning(
                "harness capture: episode %s is at level %r, not trainable token-exact: %s",
                self.episode_id,
                level,
                "; ".join(new),
            )
            self.capture.problems += new
        self.capture.level = level


class CaptureProxy:
    """The episodes whose agents may call the engine now, by episode id."""

    def __init__(self) -> None:
        self._episodes: dict[str, EpisodeCapture] = {}
        self.http: httpx.AsyncClient | None = None  # pooled, opened and closed with the app

    def open_episode(
        self,
        upstream: Upstream,
        *,
        episode_id: str,
        temperature: float,
        max_calls: int = 0,
        max_tokens: int = MAX_TOKENS,
    ) -> EpisodeCapture:
        episode = EpisodeCapture(
            episode_id=episode_id,
            key=secrets.token_urlsafe(24),
            upstream=upstream,
            sampling=training_sampling(temperature),
            max_calls=max_calls,
            max_tokens=max_tokens,
        )
        if episode_id in self._episodes:
            raise ConfigError(f"harness episode {episode_id} already has a capture open; close it first")
        self._episodes[episode_id] = episode
        return episode

    def close_episode(self, episode_id: str) -> HarnessCapture:
        """The episode's capture; its route and key open nothing from now on."""
        return self._episodes.pop(episode_id).capture

    def episode_for(self, request: Request) -> EpisodeCapture | None:
        """The episode whose route the call came by, if it carries that episode's key."""
        episode = self._episodes.get(request.path_params["episode_id"])
        authorization = request.headers.get("authorization", "")
        key = authorization[7:] if authorization[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        if episode is None or not secrets.compare_digest(key.encode(), episode.key.encode()):
            return None
        return episode

    async def chat(self, request: Request) -> Response:
        episode = self.episode_for(request)
        if episode is None:
            return JSONResponse(error_body("a harness agent calls with its own episode's key", "401"), 401)
        raw = await _body(request)
        if raw is None:
            message = f"the request body is over the capture proxy's MAX_BODY_BYTES ({MAX_BODY_BYTES}); send less"
            return JSONResponse(error_body(message, "request_too_large"), 413)
        try:
            body = json.loads(raw)
        except ValueError:
            return JSONResponse(error_body("the request body is not JSON", "invalid_request"), 400)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return JSONResponse(
                error_body("a chat completion needs a JSON object with `messages`", "invalid_request"), 400
            )
        streaming = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if 0 < episode.max_calls <= episode.started:
            episode.capture.budget_stops += 1
            stop = budget_reply(body.get("model") or "", secrets.token_hex(6))
            return _sse(harness_sse.chunks(stop, include_usage=include_usage)) if streaming else JSONResponse(stop)
        try:
            sent = upstream_body(
                body, sampling=episode.sampling, max_tokens=episode.max_tokens, model=episode.upstream.model
            )
        except RequestRefused as refusal:
            return JSONResponse(error_body(str(refusal), "invalid_request"), 400)
        episode.started += 1  # counted before the engine answers: parallel calls cannot overrun the limit
        forwarded = self._forward(episode, body, sent, _int(request.headers.get("x-stainless-retry-count")))
        if not streaming:
            status, reply = await forwarded
            return JSONResponse(reply, status)
        # A streaming agent gets a real status when the engine answers in time (so its SDK
        # retries a 500), and SSE comments while it waits longer.
        answered = asyncio.ensure_future(forwarded)
        await asyncio.wait({answered}, timeout=KEEPALIVE_S)
        if not answered.done():
            return _sse(_stream(answered, include_usage))
        status, reply = answered.result()
        return (
            _sse(harness_sse.chunks(reply, include_usage=include_usage))
            if status == 200
            else JSONResponse(reply, status)
        )

    async def _forward(
        self, episode: EpisodeCapture, body: dict[str, Any], sent: dict[str, Any], retry_count: int
    ) -> tuple[int, dict[str, Any]]:
        assert self.http is not None, "the capture proxy's app is not running (create_capture_app's lifespan)"
        try:
            status, reply = await episode.upstream.complete(sent, self.http)
        except BaseException:
            episode.started -= 1
            raise
        if status != 200 or not isinstance(reply, dict) or not reply.get("choices"):
            episode.started -= 1  # nothing sampled: the agent's retry is the same step
            episode.capture.note_failure(status, reply)
            return (status if status != 200 else 502), reply if isinstance(reply, dict) else error_body(
                str(reply), "bad"
            )
        try:
            call = captured_call(f"c{len(episode.capture.calls)}", body, sent, reply, retry_count)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as error:
            # An engine reply not shaped as vLLM's: the agent still gets it; the capture says so.
            episode.note_level("text", [f"the engine's reply could not be read ({error!r})"])
        else:
            episode.capture.calls.append(call)
            episode.note_level(call.level, call.problems)
        return 200, agent_reply(reply, wants_logprobs=bool(body.get("logprobs")))


async def _body(request: Request) -> bytes | None:
    """The request's body, or None past MAX_BODY_BYTES (read no further: all episodes share this memory)."""
    if _int(request.headers.get("content-length")) > MAX_BODY_BYTES:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _sse(events: Iterator[bytes] | AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream")


async def _stream(answered: asyncio.Future[tuple[int, dict[str, Any]]], include_usage: bool) -> AsyncIterator[bytes]:
    """Keepalive comments until the engine answers, then its answer as events."""
    while not answered.done():
        await asyncio.wait({answered}, timeout=KEEPALIVE_S)
        if not answered.done():
            yield harness_sse.KEEPALIVE
    status, reply = answered.result()
    events = (
        harness_sse.chunks(reply, include_usage=include_usage)
        if status == 200
        else harness_sse.error_event(status, reply)
    )
    for chunk in events:
        yield chunk


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


def error_body(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "corral_capture", "code": code}}


def create_capture_app(proxy: CaptureProxy) -> Starlette:
    """The proxy's one route, an episode's chat completions, with the pooled client the
    proxy reaches engines with for as long as the app runs. Starlette's own routing: FastAPI's
    request handling adds about 0.1 ms a call here, for nothing this route uses."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_connections=None)) as http:
            proxy.http = http
            yield
            proxy.http = None

    return Starlette(
        routes=[Route("/episodes/{episode_id}/v1/chat/completions", proxy.chat, methods=["POST"])], lifespan=lifespan
    )
