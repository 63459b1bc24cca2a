"""An agent's request keys that would make vLLM sample from another policy than the one trained
(beam search, best-of, its own logits processors) are refused before the engine sees them."""

from __future__ import annotations

from typing import Any

import pytest

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
