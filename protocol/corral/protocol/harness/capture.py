"""An episode's capture, and its training trace in OpenEnv 0.10's `TrainingTrace` shape.

TRL 1.16's `HarnessRolloutWorker` reads the trace (`fetch_training_trace()`). corral does not
import openenv: the dicts are shaped as its pydantic model validates them (strict, no extra
keys), and the tests check them with that model and with TRL's own trace-to-rows functions.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.errors import CaptureNotTrainable
from corral.protocol.harness.calls import CapturedCall, CaptureLevel
from corral.protocol.harness.graph import CallGraph

MAX_FAILURES = 10  # distinct failures kept: an engine down fails every call alike


class CaptureSummary(BaseModel):
    """The graph in numbers, for the ended observation and the episode record."""

    model_config = ConfigDict(extra="forbid")

    level: CaptureLevel
    calls: int
    roots: int
    paths: int
    retries: int
    side_calls: int
    budget_stops: int


class HarnessCapture(BaseModel):
    """Everything the proxy kept of one episode's model calls.

    Calls past the step limit are answered with a stop message and only counted
    (`budget_stops`): they never reached the engine, so there is nothing of them to train."""

    model_config = ConfigDict(extra="forbid")

    level: CaptureLevel = "tokens"
    calls: list[CapturedCall] = Field(default_factory=list)
    budget_stops: int = 0
    problems: list[str] = Field(default_factory=list)
    # Why calls the engine never answered (unreachable, too slow, an error, the relay's client
    # gone), each once: the evidence for an ending the platform caused.
    failures: list[str] = Field(default_factory=list)

    def note_failure(self, status: int, reply: Any) -> None:
        error = reply.get("error") if isinstance(reply, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        failure = f"{status}: {message if isinstance(message, str) else str(reply)[:200]}"
        if failure not in self.failures and len(self.failures) < MAX_FAILURES:
            self.failures.append(failure)

    def graph(self) -> CallGraph:
        return CallGraph.build(self.calls)

    def summary(self) -> CaptureSummary:
        graph = self.graph()
        return CaptureSummary(
            level=self.level,
            calls=len(self.calls),
            roots=len(graph.roots),
            paths=len(graph.paths),
            retries=len(graph.retries),
            side_calls=len(graph.side_calls),
            budget_stops=self.budget_stops,
        )


def training_trace(capture: HarnessCapture) -> dict[str, Any]:
    """The capture as OpenEnv 0.10's `TrainingTrace` (schema 1): one turn per training call, in
    the graph's depth-first order, so TRL's chain-to-rows (which forks on any drift under
    `lossless_capture`) makes one row per root-to-leaf path, each call trained once.

    Raises `CaptureNotTrainable` when the capture has no token ids (level below `tokens`)."""
    if capture.level != "tokens":
        raise CaptureNotTrainable(
            f"this harness episode's capture is at level {capture.level!r} ({'; '.join(capture.problems)}): "
            "there is no training trace without the engine's token ids; serve vLLM >= 0.10 (it returns "
            "them when asked) or use the episode for evaluation"
        )
    graph = capture.graph()
    return {"schema_version": 1, "turns": [_turn(call, graph) for call in graph.training_order()]}


def _turn(call: CapturedCall, graph: CallGraph) -> dict[str, Any]:
    prompt, completion = call.prompt_token_ids, call.completion_token_ids
    return {
        "node_id": call.node_id,
        "prompt_token_ids": list(prompt),
        "completion_token_ids": list(completion),
        "per_token_logps": list(call.per_token_logps),
        "loss_mask": [0] * len(prompt) + [1] * len(completion),  # 1 on what the engine sampled, only
        "request": {key: call.request[key] for key in ("messages", "tools") if key in call.request},
        "response": {"choices": [{"message": call.message, "finish_reason": call.finish_reason}]},
        "metadata": {
            "parent": graph.training_parent(call.node_id),
            "kind": graph.kind(call.node_id),
            "sampling_params": call.sampling,
            "requested_sampling_params": call.requested_sampling,
            "retry_count": call.retry_count,
        },
    }
