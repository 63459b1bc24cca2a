"""What an environment class records of its episodes (`Bundle(url, record_dir=...)`): one
`RolloutRecord` per episode, joined by episode id to the server's record of it, with where it
sits in an AsyncGRPO run (`rollout_place`). An environment sees no tokens (the trainer holds
them), so its records carry none: the calls and their answers are in the server's record.

Under AsyncGRPO a group's records are written together once all its members have their reward,
as TRL scores a group, each with TRL's advantage when the environments' reward is the whole of
it (`_score_group`: the reward less the group's mean, over its standard deviation plus 1e-8,
among the scored members; 0 for an unscored one). A group the run stopped before it was complete
was never scored by TRL either, and is not recorded.
"""

from __future__ import annotations

import statistics
import threading

from corral.client import rollout_place
from corral.client.episode import Episode
from corral.protocol.catalog import END_TURN
from corral.protocol.record_store import RecordWriter
from corral.protocol.records import RolloutRecord, TrainingContext

_lock = threading.Lock()
_writers: dict[tuple[str, str], RecordWriter] = {}  # one per folder and run in a process: its files are its own
_groups: dict[tuple[str, str, int], list[RolloutRecord]] = {}  # members of groups not yet complete


def record_episode(
    root: str, run: str, toolset: str, episode: Episode, split: str | None, place: TrainingContext
) -> None:
    """Record the ended `episode` (of a task of `split`) in `run` under `root`: at once, or with
    its group once that is complete."""
    opened = episode.opened
    if opened is None:
        return
    tools = [call for call in episode.calls if call.tool != END_TURN]
    record = RolloutRecord(
        episode_id=opened.episode_id,
        task_id=opened.task_id,
        split=split,
        toolset=toolset,
        reward=episode.reward,
        status=episode.status,
        reason=episode.reason,
        tool_calls=len(tools),
        tool_errors=sum(call.observation.error is not None for call in tools),
        **place.model_dump(),
    )
    size = rollout_place.group_size()
    if place.group is None or size is None:
        _writer(root, run, toolset).write(record)
        return
    with _lock:
        members = _groups.setdefault((root, run, place.group), [])
        members.append(record)
        if len(members) < size:
            return
        del _groups[root, run, place.group]
    if rollout_place.rewards_are_environments():
        members = [
            member.model_copy(update={"advantage": advantage})
            for member, advantage in zip(members, trl_advantages([m.reward for m in members]), strict=True)
        ]
    for member in sorted(members, key=lambda m: m.group_index or 0):
        _writer(root, run, toolset).write(member)


def trl_advantages(rewards: list[float | None]) -> list[float]:
    """AsyncGRPO's advantages of one group's rewards (None: unscored), as TRL computes them."""
    scored = [reward for reward in rewards if reward is not None]
    if not scored:
        return [0.0] * len(rewards)
    mean, std = statistics.fmean(scored), statistics.pstdev(scored)
    return [0.0 if reward is None else (reward - mean) / (std + 1e-8) for reward in rewards]


def _writer(root: str, run: str, source: str) -> RecordWriter:
    with _lock:
        if (root, run) not in _writers:
            _writers[root, run] = RecordWriter(root, "rollouts", run=run, source=source)
        return _writers[root, run]
