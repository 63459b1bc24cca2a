"""One episode played over a `Session`: its reset, the agent's tool calls and turns, and how
it ended. The generated environment classes and `corral.training`'s rollouts both drive their
episodes through this class.

    episode = Episode(session, server_limits)
    opened = episode.start(ResetData(split="train", index=0))   # the prompt and the tools
    episode.call("submit_schedule", {"actions": [0] * 24}).answer
    episode.finish()                                          # end the turns left open
    episode.reward, episode.scores, episode.reason
    episode.calls                                             # the transcript: every call, answered
    copies = episode.fork(3)                                  # three more at this turn, each on its own session

In Jupyter an episode shows its transcript (`corral.client.display`); `str(episode)` is the same
as plain text.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from corral.client.display import episode_doc
from corral.client.doc import Displayed, Doc
from corral.client.session import Session
from corral.errors import (
    CapacityError,
    NoEpisode,
    RewardError,
    ServerError,
    ServerUnreachable,
    SessionLost,
)
from corral.protocol.catalog import END_TURN, RUN_AGENT, RUN_AGENT_GRACE_S, ToolSpec
from corral.protocol.frames import (
    EPISODE_ENDED,
    FORK_METHOD,
    REPLAY_RESET_DEADLINES,
    CallTool,
    CallToolObservation,
    ForkRefusal,
    JsonRpcRequest,
    Limits,
    McpReply,
    McpRequest,
    ObservationReply,
    ResetData,
    ResetObservation,
    ResetRequest,
    StepRequest,
    ToolError,
)
from corral.protocol.outcomes import EpisodeStatus
from corral.protocol.rewards import RewardRule, pick_reward

log = logging.getLogger("corral.client")

REPLY_MARGIN_S = 30.0  # the server enforces deadlines; the client waits a little longer
MAX_CLOSING_TURNS = 64
CAPACITY_FIRST_PAUSE_S, CAPACITY_MAX_PAUSE_S = 0.25, 5.0
T = TypeVar("T")
SERVER_LOST = "server_lost"  # the cause of an ending the client saw alone: the server went away mid-episode


@dataclass(frozen=True)
class CallRecord:
    """One call the agent made in an episode, and the observation that answered it."""

    tool: str
    arguments: dict[str, Any]
    observation: CallToolObservation


class Episode(Displayed):
    """One episode on `session`, under the server's limits (or lower ones the reset asks for).

    Args:
        session: the session the episode is played on (one episode at a time).
        server_limits: the server's deadlines (its `/metadata`): how long to wait for the reset.
        reward: the client's own reward rule, if any; by default the server's reward is taken.
        capacity_wait_s: how long a reset waits for a free session when the server is at its
            limit (0: refused at once, with `CapacityError`).
    """

    def __init__(
        self, session: Session, server_limits: Limits, *, reward: RewardRule = None, capacity_wait_s: float = 0.0
    ):
        self.session = session
        self.limits = server_limits
        self._rule = reward
        self._capacity_wait_s = capacity_wait_s
        self.opened: ResetObservation | None = None
        self.open = False  # the agent may still act
        self.reward: float | None = None
        self.scores: dict[str, float] = {}
        self.status: EpisodeStatus | None = None  # scored, failed (by the agent) or unscored, once ended
        self.reason: str | None = None  # why it ended early (failed or unscored)
        self.cause: str | None = None  # what ended it, in a word (outcomes.CAUSES, or SERVER_LOST); None: not said
        self.seconds: dict[str, float] = {}  # the server's seconds by phase: start, reset, tools, verify, total
        self.calls: list[CallRecord] = []  # the transcript, kept for people reading it
        self.final: ResetObservation | CallToolObservation | None = None  # what ended it (e.g. verifier_output)

    @property
    def tools(self) -> list[ToolSpec]:
        """The tools the episode offers (its env's, then end_turn)."""
        return self.opened.offered_tools if self.opened is not None else []

    @property
    def unscored(self) -> bool:
        return self.opened is not None and not self.open and self.reward is None

    def start(self, data: ResetData) -> ResetObservation:
        """Reset: deploy the task's env and open its first turn."""
        wait = min(data.reset_timeout_s or self.limits.reset_timeout_s, self.limits.reset_timeout_s)
        reply = self._with_capacity(lambda: self.session.request(ResetRequest(data=data), wait + REPLY_MARGIN_S))
        self.opened = opened = _observation(reply).parse(ResetObservation)
        self.limits = opened.limits or self.limits
        if opened.metadata.get("limits"):  # asked for more than the server allows: it capped them
            log.warning(
                "the server at %s capped this episode's limits: %s",
                self.session.url,
                "; ".join(opened.metadata["limits"]),
            )
        self.open = not opened.done
        if opened.done:
            self._end(opened)
        return opened

    def call(self, name: str, arguments: dict[str, Any]) -> CallToolObservation:
        """Call one of the episode's tools (`end_turn` ends the turn); once the episode has
        ended, every call answers that it has, with the reason it ended unscored, if it did."""
        if self.opened is None:
            raise NoEpisode(f"{name} was called before an episode started: call reset(**row) first")
        if not self.open:
            ended = f"{EPISODE_ENDED} {self.reason or ''}".strip()
            observed = CallToolObservation(tool_name=name, result=ended, done=True, reward=self.reward)
            self.calls.append(CallRecord(name, dict(arguments), observed))
            return observed
        # end_turn: the env's reply, then the verification; any step: a replay judging its ending.
        deadline = self._deadline(name) + REPLAY_RESET_DEADLINES * self.limits.reset_timeout_s
        request = StepRequest(data=CallTool(tool_name=name, arguments=arguments))
        try:
            observed = _observation(self.session.request(request, deadline + REPLY_MARGIN_S)).parse(CallToolObservation)
        except (ServerError, SessionLost, ServerUnreachable) as error:  # ServerUnreachable: it died while idle
            reason = f"the server went away: {error}"
            failure = ToolError(error_type="transport_error", message=f"{EPISODE_ENDED} {reason}")
            observed = CallToolObservation(
                tool_name=name,
                error=failure,
                done=True,
                status="unscored",
                reason=reason,
                metadata={"cause": SERVER_LOST},
            )
        self.calls.append(CallRecord(name, dict(arguments), observed))
        if observed.done:
            self._end(observed)
        return observed

    def _deadline(self, name: str) -> float:
        """How long the server may take over a call of `name`: a tool's deadline; end_turn's
        reply and the verification; run_agent's agent, then the same (RUN_AGENT_GRACE_S between)."""
        ending = 2 * self.limits.reset_timeout_s
        if name == RUN_AGENT:
            return (self.limits.agent_timeout_s or self.limits.tool_timeout_s) + RUN_AGENT_GRACE_S + ending
        return ending if name == END_TURN else self.limits.tool_timeout_s

    def end_turn(self, response: str = "") -> CallToolObservation:
        return self.call(END_TURN, {"response": response})

    def finish(self) -> None:
        """End every turn the agent left open with an empty reply, so the server scores what
        the agent did: it does by the last turn of the budget it named at the reset
        (`limits.max_turns`). Past that (or MAX_CLOSING_TURNS, from a server that names none)
        the episode ends at the task's failure score, as an ending the agent caused: its turns
        were the agent's to use, and a null reward would drop them from training."""
        closing = self.limits.max_turns or MAX_CLOSING_TURNS
        for _ in range(closing):
            if not self.open:
                return
            self.end_turn("")
        if not self.open:
            return
        self.open = False
        failure = self.opened.failure_score if self.opened is not None else None
        self.status, self.reward = "failed", 0.0 if failure is None else failure
        self.reason = f"the episode did not end after {closing} empty turns, the server's turn budget"

    def fork(self, n: int) -> list[Episode]:
        """n copies of this episode at its current turn, each on a session of its own that plays,
        ends and is scored on its own; this one is untouched. The server makes them as the
        task's env declares (replay: its calls again in a fresh env, each answer checked; copy:
        a fresh sandbox holding a copy of its files), and
        refuses (ServerError, or CapacityError past its session limit) an env that declares no
        way, or a fork that would pass its limit. Close each copy's session when done with it."""
        if self.opened is None or not self.open:
            raise NoEpisode("fork needs an episode in play: reset, and fork before it ends")
        request = JsonRpcRequest(jsonrpc="2.0", method=FORK_METHOD, params={"n": n}, id=1)
        # A copy is a reset and the episode's calls again, each within its deadline.
        per_call = max(self.limits.tool_timeout_s, self.limits.reset_timeout_s)
        wait = self.limits.reset_timeout_s + per_call * len(self.calls) + REPLY_MARGIN_S
        reply = self.session.request(McpRequest(data=request.model_dump()), wait)
        if not isinstance(reply, McpReply):
            raise ServerError(
                "INVALID_REPLY", f"expected an mcp reply to the fork, the server sent a {reply.type} frame"
            )
        if (error := reply.data.error) is not None:
            data = error.data if isinstance(error.data, dict) else {}
            code = str(data.get("code", error.code))
            refused = CapacityError if code == ForkRefusal.CAPACITY_REACHED else ServerError
            raise refused(code, error.message, data)
        result = reply.data.result
        return [
            self._copy(self.session.attached(session_id), episode_id)
            for session_id, episode_id in zip(result["session_ids"], result["episode_ids"], strict=True)
        ]

    def _copy(self, session: Session, episode_id: str) -> Episode:
        """This episode as a fork's copy on `session` sees it: the transcript so far, its own id."""
        copy = Episode(session, self.limits, reward=self._rule, capacity_wait_s=self._capacity_wait_s)
        assert self.opened is not None
        copy.opened = self.opened.model_copy(update={"episode_id": episode_id})
        copy.open = True
        copy.calls = list(self.calls)
        return copy

    def _doc(self) -> Doc:
        return episode_doc(self)

    def __str__(self) -> str:
        return episode_doc(self).text()

    def _with_capacity(self, request: Callable[[], T]) -> T:
        """`request()`, tried again while the server is at its session limit, for up to
        `capacity_wait_s` seconds in all (backing off from 0.25 s to 5 s)."""
        deadline, pause = time.monotonic() + self._capacity_wait_s, CAPACITY_FIRST_PAUSE_S
        while True:
            try:
                return request()
            except CapacityError:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, CAPACITY_MAX_PAUSE_S)

    def _end(self, observed: ResetObservation | CallToolObservation) -> None:
        self.open = False
        self.final = observed
        self.scores = observed.scores or {}
        self.status = observed.status
        self.reward, self.reason = observed.reward, observed.reason
        self.cause, self.seconds = observed.metadata.get("cause"), observed.metadata.get("seconds") or {}
        if self.status == "scored" and self._rule is not None:  # a failure's score is the task's, not a rule's
            try:
                self.reward = pick_reward(self.scores, self._rule)
            except RewardError as error:
                self.status, self.reward, self.reason, self.cause = "unscored", None, str(error), "reward_failed"
        if self.reward is None and self.reason is None:
            self.reason = "the episode ended without a reward"


def _observation(reply: Any):
    if not isinstance(reply, ObservationReply):
        raise ServerError("INVALID_REPLY", f"expected an observation, the server sent a {reply.type} frame")
    return reply.data
