"""Requests a harness agent can send that the capture proxy refuses before the engine sees them:
keys that would make vLLM sample from another policy than the one trained (beam search,
best-of, its own logits processors), and bodies too large to hold."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from corral.server.harness import capture as harness_capture
from corral.server.harness.capture import CaptureProxy, create_capture_app
from corral.server.harness.request import RequestRefused, upstream_body

TASK = {"model": "m", "messages": [{"role": "user", "content": "fix run.sh"}]}


@pytest.mark.parametrize(
    "extra",
    [
        {"use_beam_search": True},
        {"best_of": 4},
        {"logits_processors": ["my_module:Boost"]},
        {"vllm_xargs": {"boost": 5}},
    ],
)
def test_vllm_extras_that_change_the_sampled_policy_are_refused(extra: dict[str, Any]):
    with pytest.raises(RequestRefused, match="another policy"):
        upstream_body(TASK | extra, sampling={"temperature": 1.0}, max_tokens=64, model="m")


@pytest.mark.parametrize("extra", [{"use_beam_search": False}, {"best_of": 1}, {"seed": 3}])
def test_their_defaults_pass(extra: dict[str, Any]):
    body = upstream_body(TASK | extra, sampling={"temperature": 1.0}, max_tokens=64, model="m")
    assert body["messages"] == TASK["messages"]


class CountingUpstream:
    """An engine that answers every call and counts them."""

    model = "m"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, body: dict[str, Any], http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
        self.calls += 1
        return 200, {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_past_the_cap_is_refused_unread(monkeypatch: pytest.MonkeyPatch, chunked: bool):
    # A huge body would be held whole in the server's memory, which every episode shares.
    monkeypatch.setattr(harness_capture, "MAX_BODY_BYTES", 4096)
    proxy, upstream = CaptureProxy(), CountingUpstream()
    episode = proxy.open_episode(upstream, episode_id="e", temperature=1.0)
    flood = json.dumps(TASK | {"padding": "x" * 8192}).encode()
    content = iter([flood[:1000], flood[1000:]]) if chunked else flood
    with TestClient(create_capture_app(proxy)) as client:
        url = "/episodes/e/v1/chat/completions"
        headers = {"authorization": f"Bearer {episode.key}"}
        refused = client.post(url, content=content, headers=headers)
        assert refused.status_code == 413 and "MAX_BODY_BYTES" in refused.json()["error"]["message"]
        assert client.post(url, json=TASK, headers=headers).status_code == 200
    assert upstream.calls == 1
