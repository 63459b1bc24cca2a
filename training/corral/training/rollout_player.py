"""One token-exact rollout on one session: sample, run the tool calls, render the answers, repeat.

`CorralRollout` (rollouts.py) runs many of these at once, for a trainer or for `evaluate`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.client import EnvironmentSpec, Episode, Session
from corral.protocol.catalog import Toolset
from corral.protocol.frames import ResetData
from corral.protocol.outcomes import EpisodeStatus
from corral.protocol.records import RolloutRecord, TrainingContext
from corral.training.generation import Generator
from corral.training.processors import Message, Processor, Turn


@dataclass
class Rollout:
    """One episode as the trainer sees it, and what it came to.

    `completion_ids[i]` was sampled by the model where `env_mask[i]` is 1 (with `logprobs[i]`,
    NaN when the generator did not compute it), and rendered from the server's answer where it
    is 0 (logprob 0). `messages` is the conversation and `tools` the tools offered; decoding
    `prompt_ids + completion_ids` gives the chat template's rendering of them. `episode_id` is
    the server's id of the episode, which its record carries too.
    """

    task_id: str
    toolset: str
    prompt_ids: list[int]
    episode_id: str = ""
    split: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    reward: float | None = None
    status: EpisodeStatus | None = None  # scored, failed (by the agent: its failure score) or unscored
    unscored_reason: str | None = None  # why it failed or went unscored
    cause: str | None = None  # what ended it, in a word (the server's `outcomes.CAUSES`)
    seconds: dict[str, float] = field(default_factory=dict)  # the server's, by phase (start, ..., verify, total)
    truncated: str | None = None  # the limit that stopped it: "completion_length" or "tool_calls"
    tool_calls: int = 0
    tool_errors: int = 0
    context: TrainingContext = field(default_factory=TrainingContext)  # its step, group, policy version

    def add(self, ids: list[int], *, sampled: bool, logprobs: Sequence[float] | None = None) -> None:
        self.completion_ids += ids
        self.env_mask += [int(sampled)] * len(ids)
        self.logprobs += list(logprobs) if sampled and logprobs is not None else [0.0] * len(ids)

    def record(self) -> RolloutRecord:
        """The client's side of the episode's record (joined to the server's by `episode_id`)."""
        return RolloutRecord(
            **self.context.model_dump(),
            episode_id=self.episode_id,
            task_id=self.task_id,
            split=self.split,
            toolset=self.toolset,
            prompt_ids=self.prompt_ids,
            completion_ids=self.completion_ids,
            env_mask=self.env_mask,
            logprobs=self.logprobs,
            messages=self.messages,
            tools=self.tools,
            reward=self.reward,
            status=self.status,
            reason=self.unscored_reason,
            truncated=self.truncated,
            tool_calls=self.tool_calls,
            tool_errors=self.tool_errors,
        )


@dataclass(frozen=True)
class RolloutLimits:
    """Where an episode is cut: total completion ids (sampled and rendered), and tool calls
    (end_turn included). A cut episode's open turns are ended with empty replies, so the server
    scores what the model did, and the rollout is counted as truncated."""

    max_completion_length: int
    max_tool_calls: int


class RolloutPlayer:
    """One rollout on one session: the loop of sampling, tool calls and rendered answers."""

    def __init__(
        self,
        session: Session,
        spec: EnvironmentSpec,
        task: dict[str, Any],
        processor: Processor,
        generator: Generator,
        limits: RolloutLimits,
    ):
        self.episode = Episode(session, spec.server_limits, reward=spec.reward, capacity_wait_s=spec.capacity_wait_s)
        self.spec = spec
        self.task = task
        self.processor = processor
        self.generator = generator
        self.limits = limits
        self.rollout: Rollout

    def play(self, prompt: list[Message]) -> Rollout:
        messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
        episode_id = uuid.uuid4().hex  # sent in the reset: the server's record of the episode carries it
        opened = self.episode.start(
            ResetData(
                split=self.task["split"],
                index=self.task["index"],
                task_id=self.task["task_id"],
                episode_id=episode_id,
                tool_timeout_s=self.spec.tool_timeout_s,
                reset_timeout_s=self.spec.reset_timeout_s,
            )
        )
        tools = [tool.as_chat() for tool in opened.offered_tools]
        self.rollout = rollout = Rollout(
            self.task["task_id"],
            self.task["toolset"],
            self.processor.render_prompt(messages, tools),
            opened.episode_id,
            self.task["split"],
            tools,
            messages=messages,
        )
        if opened.done:  # the env could not start: nothing to sample; one masked id keeps TRL's shapes
            rollout.add(self.processor.stop_token_ids[:1], sampled=False)
            return self._scored(rollout)
        while self.episode.open:
            budget = self.limits.max_completion_length - len(rollout.completion_ids)
            if budget <= 0:
                rollout.truncated = "completion_length"
                break
            sample = self.generator.generate(
                rollout.prompt_ids + rollout.completion_ids,
                max_new_tokens=budget,
                stop_token_ids=self.processor.stop_token_ids,
            )
            rollout.add(sample.token_ids, sampled=True, logprobs=sample.logprobs)
            if not sample.stopped:  # cut mid-turn: kept as the text it is, its calls not run
                rollout.messages.append({"role": "assistant", "content": self.processor.parse(sample.token_ids).text})
                rollout.truncated = "completion_length"
                break
            turn = self.processor.parse(sample.token_ids)
            rollout.messages.append(turn.message())
            answers = self._answer(turn)
            if not self.episode.open or rollout.truncated:
                break
            chunk = self.processor.render_env_turn(answers)
            if len(rollout.completion_ids) + len(chunk) >= self.limits.max_completion_length:
                rollout.truncated = "completion_length"  # no room left to sample after the answer
                break
            rollout.add(chunk, sampled=False)
            rollout.messages += answers
        self.episode.finish()  # a limit cut it: end its turns, so the server scores what the model did
        return self._scored(rollout)

    def _answer(self, turn: Turn) -> list[Message]:
        """Run the turn's tool calls; a reply without one ends the turn with its text as the response."""
        if not turn.tool_calls:
            if not self._count_call():
                return []
            observed = self.episode.end_turn(turn.content)
            return [] if observed.done else [{"role": "user", "content": observed.answer}]
        answers = []
        for call in turn.tool_calls:
            if not self._count_call():
                return []
            if call.error is not None:
                self.rollout.tool_errors += 1
                answers.append({"role": "tool", "name": call.name or "unknown", "content": call.error})
                continue
            observed = self.episode.call(call.name, call.arguments)
            if observed.done:
                return []
            if observed.error is not None:
                self.rollout.tool_errors += 1
            answers.append({"role": "tool", "name": call.name, "content": observed.answer})
        return answers

    def _count_call(self) -> bool:
        if self.rollout.tool_calls >= self.limits.max_tool_calls:
            self.rollout.truncated = "tool_calls"
            return False
        self.rollout.tool_calls += 1
        return True

    def _scored(self, rollout: Rollout) -> Rollout:
        rollout.reward, rollout.status = self.episode.reward, self.episode.status
        rollout.unscored_reason = self.episode.reason if self.episode.status != "scored" else None
        rollout.cause, rollout.seconds = self.episode.cause, self.episode.seconds
        return rollout


def chat_tools(toolset: Toolset) -> list[dict[str, Any]]:
    """A toolset's tools as the rollout renders them in the first prompt (e.g. to SFT on the same
    context): `{"type": "function", "function": {name, description, parameters}}` each."""
    return [tool.as_chat() for tool in toolset.tools]
