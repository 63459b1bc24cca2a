"""One OpenAI chat-completions call through the capture proxy: the request the engine gets, and
what the proxy keeps of its answer.

The engine is asked for what training needs (vLLM 0.32: `return_token_ids` puts top-level
`prompt_token_ids` and `choices[].token_ids` on the reply; `logprobs` with `top_logprobs: 0`
one logprob per sampled token; `return_tokens_as_token_ids` names each as `token_id:N`), with
the training policy's sampling, never streaming. The agent's own sampling is recorded only.
"""

from __future__ import annotations

import re
from typing import Any

from corral.protocol.harness.calls import CapturedCall, CaptureLevel

# What an agent may ask for that would sample from another policy than the one trained.
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
)
# Decoding the engine would constrain: the sampled tokens would not be the policy's.
CONSTRAINED_KEYS = ("logit_bias", "allowed_token_ids", "bad_words", "min_tokens", "structured_outputs")
CONSTRAINED_PREFIX = "guided_"
# vLLM's extras that pick or reshape tokens past the policy's sampling (beam search, best of
# several, the request's own logits processors), refused unless left at their defaults.
POLICY_CHANGING = {"use_beam_search": (False,), "best_of": (1,), "logits_processors": (), "vllm_xargs": ()}
# The agent's streaming and output-length knobs: the proxy sets its own.
REPLACED_KEYS = ("stream", "stream_options", "max_tokens", "max_completion_tokens")
TOKEN_ID = re.compile(r"token_id:(\d+)")


class RequestRefused(ValueError):
    """A call the proxy does not forward; the message, sent back to the agent, says why."""


def upstream_body(body: dict[str, Any], *, sampling: dict[str, Any], max_tokens: int, model: str | None) -> dict:
    """The request the engine gets for the agent's `body`. Raises `RequestRefused`."""
    if body.get("n", 1) != 1:
        raise RequestRefused(f"n={body['n']}: the capture proxy samples one choice per call; send n=1")
    constrained = [key for key in body if key in CONSTRAINED_KEYS or key.startswith(CONSTRAINED_PREFIX)]
    constrained += [key for key, defaults in POLICY_CHANGING.items() if body.get(key) not in (None, *defaults)]
    format_type = (body.get("response_format") or {}).get("type", "text")
    if format_type != "text":
        constrained.append(f"response_format={format_type}")
    if constrained:
        raise RequestRefused(
            f"{', '.join(constrained)}: constrained decoding samples from another policy than the one "
            "trained; a harness episode's agent must send plain chat requests"
        )
    asked = [body.get(key) for key in ("max_tokens", "max_completion_tokens")]
    cap = min([value for value in asked if isinstance(value, int) and value > 0] + [max_tokens])
    forwarded = {key: value for key, value in body.items() if key not in REPLACED_KEYS and key not in SAMPLING_KEYS}
    if not forwarded.get("tools"):  # an empty list makes vLLM refuse tool_choice
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            forwarded.pop(key, None)
    return (
        forwarded
        | sampling
        | {
            "model": model or body.get("model"),
            "stream": False,
            "max_tokens": cap,
            "logprobs": True,
            "top_logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
    )


def requested_sampling(body: dict[str, Any]) -> dict[str, Any]:
    return {key: body[key] for key in (*SAMPLING_KEYS, "max_tokens", "max_completion_tokens") if key in body}


def captured_call(
    node_id: str, body: dict[str, Any], sent: dict[str, Any], reply: dict[str, Any], retry_count: int
) -> CapturedCall:
    """What the proxy keeps of one answered call: the engine's ids and logprobs as it returned
    them, and the level they reach, with each missing piece named in `problems`."""
    choice = reply["choices"][0]
    problems: list[str] = []
    prompt = reply.get("prompt_token_ids") or choice.get("prompt_token_ids")  # SGLang puts them on the choice
    entries = (choice.get("logprobs") or {}).get("content") or []
    logps = [entry.get("logprob") for entry in entries]
    named = [TOKEN_ID.fullmatch(str(entry.get("token", ""))) for entry in entries]
    completion = choice.get("token_ids")
    if completion is None and entries and all(named):  # ids named in the logprobs only
        completion = [int(match.group(1)) for match in named if match]
    if not prompt:
        problems.append("the engine returned no prompt_token_ids (vLLM >= 0.10 returns them for return_token_ids)")
    if completion is None:
        problems.append("the engine returned no completion token ids (choices[].token_ids)")
    if not entries or any(not isinstance(value, (int, float)) for value in logps):
        problems.append("the engine returned no logprob for some sampled tokens (logprobs.content)")
        logps = []
    elif completion is not None and len(logps) != len(completion):
        problems.append(f"the engine returned {len(logps)} logprobs for {len(completion)} sampled tokens")
        logps = []
    elif completion is not None and all(named) and [int(m.group(1)) for m in named if m] != completion:
        problems.append("the engine's token_id:N logprob tokens differ from its token_ids")
        logps = []
    level: CaptureLevel = "tokens" if not problems else "logprobs" if logps else "text"
    return CapturedCall(
        node_id=node_id,
        request=body,
        sampling={key: sent[key] for key in (*SAMPLING_KEYS, "max_tokens") if key in sent},
        requested_sampling=requested_sampling(body),
        level=level,
        prompt_token_ids=list(prompt or []) if level == "tokens" else [],
        completion_token_ids=list(completion or []) if level == "tokens" else [],
        per_token_logps=[float(value) for value in logps],
        message=choice.get("message") or {},
        finish_reason=choice.get("finish_reason"),
        retry_count=retry_count,
        problems=problems,
    )


def agent_reply(reply: dict[str, Any], *, wants_logprobs: bool) -> dict[str, Any]:
    """The engine's reply as the agent gets it: without the ids it did not ask for (nor the
    logprobs, unless it asked)."""
    reply = {key: value for key, value in reply.items() if key not in ("prompt_token_ids", "prompt_logprobs")}
    choices = []
    for choice in reply.get("choices", []):
        choice = {key: value for key, value in choice.items() if key not in ("token_ids", "prompt_token_ids")}
        if not wants_logprobs:
            choice["logprobs"] = None
        choices.append(choice)
    return reply | {"choices": choices}


def budget_reply(model: str, call_id: str) -> dict[str, Any]:
    """The proxy's own answer to a call past the step limit: a final assistant message."""
    return {
        "id": f"budget-{call_id}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Step budget exhausted; stopping.", "tool_calls": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }
