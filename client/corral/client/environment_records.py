"""What an environment class records of its episodes (`Bundle(url, record_dir=...)`): one
`RolloutRecord` per episode, joined by episode id to the server's record of it, with where it
sits in an AsyncGRPO run (`rollout_place`). An environment sees no tokens (the trainer holds
them), so its records carry none: the calls and their answers are in the server's record."""

from __future__ import annotations

import threading

from corral.client.episode import Episode
from corral.client.record_store import RecordWriter
from corral.protocol.catalog import END_TURN
from corral.protocol.records import RolloutRecord, TrainingContext

_lock = threading.Lock()
_writers: dict[tuple[str, str], RecordWriter] = {}  # one per folder and run in a process: its files are its own


def record_episode(root: str, run: str, toolset: str, episode: Episode, split: str | None,
                   place: TrainingContext) -> None:
    """Append the ended `episode`'s record (of a task of `split`) to `run` under `root`."""
    opened = episode.opened
    if opened is None:
        return
    tools = [call for call in episode.calls if call.tool != END_TURN]
    record = RolloutRecord(
        episode_id=opened.episode_id, task_id=opened.task_id, split=split, toolset=toolset,
        reward=episode.reward, status=episode.status, reason=episode.reason, tool_calls=len(tools),
        tool_errors=sum(call.observation.error is not None for call in tools), **place.model_dump())
    _writer(root, run, toolset).write(record)


def _writer(root: str, run: str, source: str) -> RecordWriter:
    with _lock:
        if (root, run) not in _writers:
            _writers[root, run] = RecordWriter(root, "rollouts", run=run, source=source)
        return _writers[root, run]
