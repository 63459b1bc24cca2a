"""A lazy index of training runs: run -> step -> task group -> episode, read from the records.

    index = RunIndex("records")                  # DIR/view.sqlite, beside the records' own index
    index.query("SELECT run, COUNT(*) FROM played GROUP BY run")   # what `run_views` lists
    index.records(episode_id)                    # the server's and the trainer's record, read on demand

Each query first brings the index up to date with the JSON lines files, reading only what is new:
a file that grew is read from where the index stopped (a line still being written waits for its
newline), and a file that shrank or was rewritten is indexed again from its start. A row holds
what the lists show and where the record is; the records themselves are read only when asked for.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.client.run_flags import episode_flags
from corral.client.run_headers import read_header, read_metrics
from corral.errors import ConfigError
from corral.protocol.records import EpisodeRecord, RolloutRecord, RunHeader

INDEX = "view.sqlite"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, head TEXT, indexed INTEGER);
CREATE TABLE IF NOT EXISTS played (
    episode_id TEXT PRIMARY KEY, run TEXT, server_run TEXT, task_id TEXT, split TEXT,
    step INTEGER, grp INTEGER, group_index INTEGER, policy_version INTEGER, advantage REAL,
    reward REAL, status TEXT, cause TEXT, seconds REAL, tool_calls INTEGER, flags TEXT NOT NULL DEFAULT '',
    ended_at REAL, rollout_file TEXT, rollout_offset INTEGER, episode_file TEXT, episode_offset INTEGER);
CREATE INDEX IF NOT EXISTS played_by_step ON played (run, step, task_id, reward, ended_at);
CREATE INDEX IF NOT EXISTS played_by_group ON played (run, step, grp, reward);
CREATE INDEX IF NOT EXISTS played_by_time ON played (ended_at);
CREATE INDEX IF NOT EXISTS played_by_task ON played (task_id, ended_at);
CREATE INDEX IF NOT EXISTS played_by_rollout_file ON played (rollout_file);
CREATE INDEX IF NOT EXISTS played_by_episode_file ON played (episode_file);
"""
# One row per episode, whichever side is read first: the trainer's record brings its run and place
# in it, the server's its ending, timing and flags; the run is the trainer's when it has one.
_UPSERT = {
    "rollouts": """INSERT INTO played (episode_id, run, task_id, split, step, grp, group_index, policy_version,
        advantage, reward, status, ended_at, rollout_file, rollout_offset) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
        ON CONFLICT (episode_id) DO UPDATE SET run = excluded.run, step = excluded.step, grp = excluded.grp,
        group_index = excluded.group_index, policy_version = excluded.policy_version,
        advantage = excluded.advantage, rollout_file = excluded.rollout_file,
        rollout_offset = excluded.rollout_offset""",
    "episodes": """INSERT INTO played (episode_id, run, server_run, task_id, split, status, cause, reward, seconds,
        tool_calls, flags, ended_at, episode_file, episode_offset) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
        ON CONFLICT (episode_id) DO UPDATE SET server_run = excluded.server_run, status = excluded.status,
        cause = excluded.cause, reward = excluded.reward, seconds = excluded.seconds,
        tool_calls = excluded.tool_calls, flags = excluded.flags, episode_file = excluded.episode_file,
        episode_offset = excluded.episode_offset""",
}
_FORGET = {  # a rewritten file's side of its rows, before it is read again
    "rollouts": (
        "UPDATE played SET run = server_run, step = NULL, grp = NULL, group_index = NULL, "
        "policy_version = NULL, advantage = NULL, rollout_file = NULL WHERE rollout_file = ?"
    ),
    "episodes": (
        "UPDATE played SET server_run = NULL, cause = NULL, seconds = NULL, tool_calls = NULL, flags = '', "
        "episode_file = NULL WHERE episode_file = ?"
    ),
}
_HEAD = 256  # bytes compared to tell a rewritten file from a grown one


@dataclass(frozen=True)
class EpisodeFilter:
    """What the episode lists are narrowed to (every field optional); the viewer's URL query."""

    run: str | None = None
    task: str | None = None
    split: str | None = None
    status: str | None = None
    cause: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    min_step: int | None = None
    max_step: int | None = None
    flagged: bool = False

    def where(self) -> tuple[str, list[Any]]:
        clauses, values = ["1"], []
        for clause, value in (
            ("run = ?", self.run),
            ("task_id = ?", self.task),
            ("split = ?", self.split),
            ("status = ?", self.status),
            ("cause = ?", self.cause),
            ("reward >= ?", self.min_reward),
            ("reward <= ?", self.max_reward),
            ("step >= ?", self.min_step),
            ("step <= ?", self.max_step),
        ):
            if value is not None:
                clauses.append(clause)
                values.append(value)
        if self.flagged:
            clauses.append("flags != ''")
        return " AND ".join(clauses), values


class RunIndex:
    """Training runs in a records folder, indexed lazily (see the module's docstring).

    Args:
        root: The records folder (a server's, a trainer's, or both).
        rollouts: Another folder holding the trainer's records, when it recorded elsewhere.
        success: The reward at which an episode passes (for pass@1 and pass rates).
    """

    def __init__(self, root: str | Path, rollouts: str | Path | None = None, *, success: float = 1.0):
        self.root = Path(root)
        self.success = success
        self._folders = sorted({self.root.resolve(), Path(rollouts or root).resolve()})
        for folder in self._folders:
            if not folder.is_dir():
                raise ConfigError(
                    f"no records folder {folder}: record with `corral serve BUNDLE --record {folder}` "
                    "or CorralRollout(record_dir=...), or give the folder they were recorded into"
                )
        self._db = sqlite3.connect(self.root / INDEX, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def header(self, run: str) -> RunHeader | None:
        """What the run is (`run.json` in its folder), or None for an unlabelled run."""
        return read_header(self._folders, run)

    def metrics(self, run: str) -> dict[str, dict[int, float]]:
        """The trainer's logged values by name and step (`RecordMetrics`); empty when none."""
        return read_metrics(self._folders, run)

    def query(self, sql: str, values: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of `sql` over the up-to-date index (its table `played`: one row per episode)."""
        self.refresh()
        with self._lock:
            return self._db.execute(sql, values).fetchall()

    def refresh(self) -> int:
        """Index what the records' files gained since the last call; returns the lines indexed."""
        added = 0
        with self._lock, self._db:
            known = {
                path: (size, head, indexed) for path, size, head, indexed in self._db.execute("SELECT * FROM files")
            }
            for folder in self._folders:
                for path in sorted(folder.glob("*/*.jsonl")):
                    added += self._index_file(path, known.get(str(path)))
        return added

    def _index_file(self, path: Path, known: tuple[int, str, int] | None) -> int:
        size = path.stat().st_size
        if known is not None and known[0] == size:
            return 0
        with open(path, "rb") as file:
            head = file.read(_HEAD).hex()
            start = 0
            if known is not None and size > known[0] and head[: len(known[1])] == known[1]:
                start = known[2]  # grown: read on from the last whole line indexed
            else:  # new, shrunk or rewritten: forget what it said and read it all
                self._db.execute(_FORGET[_kind(path)], (str(path),))
                self._db.execute("DELETE FROM played WHERE rollout_file IS NULL AND episode_file IS NULL")
            file.seek(start)
            data = file.read(size - start)
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        kind = _kind(path)
        rows, offset = [], start
        for line in data[:end].splitlines(keepends=True):
            rows.append(_row(kind, json.loads(line), str(path), offset, self.success))
            offset += len(line)
        self._db.executemany(_UPSERT[kind], rows)
        self._db.execute(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)", (str(path), start + end, head, start + end)
        )
        return len(rows)

    def records(self, episode_id: str) -> tuple[EpisodeRecord | None, RolloutRecord | None]:
        """The server's and the trainer's record of one episode (either may be missing), read now."""
        found = self.query(
            "SELECT episode_file, episode_offset, rollout_file, rollout_offset FROM played WHERE episode_id = ?",
            (episode_id,),
        )
        if not found:
            return None, None
        episode, rollout = _read(*found[0][:2]), _read(*found[0][2:])
        return (
            None if episode is None else EpisodeRecord.model_validate_json(episode),
            None if rollout is None else RolloutRecord.model_validate_json(rollout),
        )

    def close(self) -> None:
        self._db.close()


def _row(kind: str, record: dict[str, Any], file: str, offset: int, success: float) -> tuple[Any, ...]:
    if kind == "rollouts":
        return (
            record["episode_id"],
            record.get("run"),
            record.get("task_id"),
            record.get("split"),
            record.get("step"),
            record.get("group"),
            record.get("group_index"),
            record.get("policy_version"),
            record.get("advantage"),
            record.get("reward"),
            record.get("status"),
            record.get("ended_at"),
            file,
            offset,
        )
    seconds = record.get("seconds", {}).get("total")
    return (
        record["episode_id"],
        record.get("run"),
        record.get("run"),
        record.get("task_id"),
        record.get("split"),
        record.get("status"),
        record.get("cause"),
        record.get("reward"),
        seconds,
        record.get("tool_calls", 0),
        ",".join(episode_flags(record, success)),
        record.get("ended_at"),
        file,
        offset,
    )


def _kind(path: Path) -> str:
    return "rollouts" if path.name.startswith("rollouts-") else "episodes"


def _read(path: str | None, offset: int | None) -> bytes | None:
    if path is None or offset is None:
        return None
    with open(path, "rb") as file:
        file.seek(offset)
        return file.readline()
