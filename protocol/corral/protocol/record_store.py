"""Where episode records live: JSON lines, a folder per run, and an SQLite index beside them.

    DIR/index.sqlite                 every record's run, task, split, status, reward, and where it is
    DIR/<run>/episodes-0000.jsonl    a server's records, one JSON object a line (a new file past a size)
    DIR/<run>/rollouts-0000.jsonl    a trainer's records (the tokens), joined to the server's by episode id
    DIR/<run>/rescores.ndjson        `corral rescore`'s new scores of the run's episodes, appended, never over the old

A listing or a filter reads the index only; one record is read by seeking to its line. Each
record is flushed and committed as it is written, so what was written survives its writer being
killed, and a server restarted on the same folder adds a run beside the last one. Standard
library only (sqlite3, json): reading records needs neither torch nor the server.

    store = EpisodeStore("records")
    rows = store.find(split="eval", status="unscored")          # IndexedRecord rows, newest first
    store.episode(rows[0].episode_id)                            # the server's EpisodeRecord
    store.rollout(rows[0].episode_id)                            # the client's RolloutRecord, or None
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from corral.errors import ConfigError
from corral.protocol.records import EpisodeRecord, RecordKind, RescoreRecord, RolloutRecord

INDEX = "index.sqlite"
RESCORES = "rescores.ndjson"
MAX_FILE_BYTES = 256 * 1024 * 1024
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (run TEXT PRIMARY KEY, kind TEXT NOT NULL, source TEXT, started_at REAL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, episode_id TEXT NOT NULL, run TEXT NOT NULL,
    task_id TEXT, split TEXT, status TEXT, cause TEXT, reward REAL, ended_at REAL,
    file TEXT NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS records_by_episode ON records (kind, episode_id);
CREATE INDEX IF NOT EXISTS records_by_task ON records (kind, task_id);
CREATE INDEX IF NOT EXISTS records_by_run ON records (kind, run);
"""
_MODELS: dict[str, type[EpisodeRecord | RolloutRecord]] = {"episodes": EpisodeRecord, "rollouts": RolloutRecord}


def new_run() -> str:
    """A run's name: when it started, and a few random letters so that two never collide."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def _connect(root: Path) -> sqlite3.Connection:
    index = sqlite3.connect(root / INDEX, timeout=30, check_same_thread=False)
    index.execute("PRAGMA journal_mode=WAL")  # readers never wait for a writer, nor block one
    index.execute("PRAGMA synchronous=NORMAL")
    index.executescript(_SCHEMA)
    return index


class RecordWriter:
    """Appends records of one kind to a run's JSON lines and indexes each; safe from several threads.

    Args:
        root: The records folder (made when missing); a server and a trainer may share one.
        kind: `episodes` (a server's) or `rollouts` (a trainer's).
        run: The run's name; a new one by default (`new_run`).
        source: Who writes, for the runs table (a bundle's name, a model's).
        max_file_bytes: Past this size, the run's next record starts a new file.
    """

    def __init__(
        self,
        root: str | Path,
        kind: RecordKind,
        *,
        run: str | None = None,
        source: str = "",
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        self.root = Path(root)
        self.kind = kind
        self.run = run or new_run()
        self.max_file_bytes = max_file_bytes
        (self.root / self.run).mkdir(parents=True, exist_ok=True)
        self._index = _connect(self.root)
        with self._index:
            self._index.execute("INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?)", (self.run, kind, source, time.time()))
        self._lock = threading.Lock()
        self._number = len(list((self.root / self.run).glob(f"{kind}-*.jsonl")))
        self._file = self._open()

    def write(self, record: EpisodeRecord | RolloutRecord) -> None:
        """Append `record` (its `run` set to this writer's) and index it."""
        record = record.model_copy(update={"run": self.run})
        line = (record.model_dump_json() + "\n").encode()
        with self._lock:
            if self._file.tell() and self._file.tell() + len(line) > self.max_file_bytes:
                self._file.close()
                self._number += 1
                self._file = self._open()
            offset = self._file.tell()
            self._file.write(line)
            self._file.flush()
            file = str(Path(self._file.name).relative_to(self.root))
            status, cause, split = getattr(record, "status", None), getattr(record, "cause", None), record.split
            with self._index:
                self._index.execute(
                    "INSERT INTO records (kind, episode_id, run, task_id, split, status, cause, reward, ended_at, "
                    "file, offset, length) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        self.kind,
                        record.episode_id,
                        self.run,
                        record.task_id,
                        split,
                        status,
                        cause,
                        record.reward,
                        record.ended_at,
                        file,
                        offset,
                        len(line),
                    ),
                )

    def close(self) -> None:
        with self._lock:
            self._file.close()
            self._index.close()

    def _open(self):
        return open(self.root / self.run / f"{self.kind}-{self._number:04d}.jsonl", "ab")


def append_rescore(root: str | Path, record: RescoreRecord) -> None:
    """Append `record` to its run's rescores.ndjson (flushed: a killed re-score keeps what it wrote)."""
    with open(Path(root) / record.run / RESCORES, "a", encoding="utf-8") as file:
        file.write(record.model_dump_json() + "\n")


@dataclass(frozen=True)
class IndexedRecord:
    """A record as the index lists it: enough to filter and show a table, and where to read it."""

    kind: str
    episode_id: str
    run: str
    task_id: str
    split: str | None
    status: str | None
    cause: str | None
    reward: float | None
    ended_at: float
    file: str
    offset: int
    length: int


@dataclass(frozen=True)
class Tally:
    """A count of the records that match: in all, by status, over how many tasks, mean reward."""

    records: int
    statuses: dict[str | None, int]
    tasks: int
    mean_reward: float | None


@dataclass(frozen=True)
class RunInfo:
    run: str
    kind: str
    source: str
    started_at: float
    records: int


class EpisodeStore:
    """Records in a folder, read through its index.

    Args:
        root: The folder a server (or a trainer) recorded into.
        rollouts: Another folder holding the trainer's records, when it recorded elsewhere (a
            GPU box's); by default `root`.
    """

    def __init__(self, root: str | Path, rollouts: str | Path | None = None):
        self.root = Path(root)
        self.rollouts_root = Path(rollouts) if rollouts is not None else self.root
        self._index = self._open(self.root)
        self._rollouts_index = self._index if self.rollouts_root == self.root else self._open(self.rollouts_root)

    def runs(self) -> list[RunInfo]:
        """Every run recorded here, oldest first, with its number of records."""
        rows = self._index.execute(
            "SELECT runs.run, runs.kind, runs.source, runs.started_at, COUNT(records.id) FROM runs "
            "LEFT JOIN records ON records.run = runs.run GROUP BY runs.run ORDER BY runs.started_at"
        ).fetchall()
        return [RunInfo(*row) for row in rows]

    def find(self, *, kind: RecordKind = "episodes", limit: int | None = None, **filters: Any) -> list[IndexedRecord]:
        """The records that match every filter given, newest first (from the index only).

        Filters: `run` (a run's name or its unique prefix), `task`, `split`, `status`,
        `min_reward`, `max_reward` (which leave out the records without a reward)."""
        where, values = _where(kind, **filters)
        query = f"SELECT {_COLUMNS} FROM records WHERE {where} ORDER BY id DESC"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        return [IndexedRecord(*row) for row in self._index_of(kind).execute(query, values)]

    def tally(self, *, kind: RecordKind = "episodes", **filters: Any) -> Tally:
        """How many records match (by status), over how many tasks, and their mean reward."""
        where, values = _where(kind, **filters)
        index = self._index_of(kind)
        statuses = dict(
            index.execute(
                f"SELECT status, COUNT(*) FROM records WHERE {where} GROUP BY status ORDER BY COUNT(*) DESC", values
            ).fetchall()
        )
        tasks, mean = index.execute(
            f"SELECT COUNT(DISTINCT task_id), AVG(reward) FROM records WHERE {where}", values
        ).fetchone()
        return Tally(sum(statuses.values()), statuses, tasks, mean)

    def episode(self, episode_id: str) -> EpisodeRecord:
        """The server's record of an episode (the latest, if a client reused the id).

        Raises:
            ConfigError: no episode has that id (the message says how to list them).
        """
        found = self._latest("episodes", episode_id)
        if found is None:
            raise ConfigError(
                f"no episode {episode_id!r} is recorded in {self.root}; list them with `corral episodes {self.root}`"
            )
        return self.read(found)  # type: ignore[return-value]

    def resolve(self, prefix: str) -> str:
        """The episode id that starts with `prefix` (itself when none does).

        Raises:
            ConfigError: several ids start with it (the message says how many).
        """
        found = self._index.execute(
            "SELECT DISTINCT episode_id FROM records WHERE kind = 'episodes' AND substr(episode_id, 1, ?) = ?",
            (len(prefix), prefix),
        ).fetchall()
        if len(found) > 1 and prefix not in {row[0] for row in found}:
            raise ConfigError(f"{prefix!r} begins {len(found)} episodes' ids; give more of the id")
        return found[0][0] if len(found) == 1 else prefix

    def rollout(self, episode_id: str) -> RolloutRecord | None:
        """The trainer's record of an episode (its tokens), if one was written."""
        found = self._latest("rollouts", episode_id)
        return None if found is None else self.read(found)  # type: ignore[return-value]

    def rescores(self) -> dict[str, RescoreRecord]:
        """Each re-scored episode's latest re-score, by episode id (`corral rescore`)."""
        latest: dict[str, RescoreRecord] = {}
        for path in sorted(self.root.glob(f"*/{RESCORES}")):
            with open(path, encoding="utf-8") as file:
                for line in file:
                    if line.strip():
                        record = RescoreRecord.model_validate_json(line)
                        if (
                            record.episode_id not in latest
                            or record.rescored_at >= latest[record.episode_id].rescored_at
                        ):
                            latest[record.episode_id] = record
        return latest

    def records(self, rows: list[IndexedRecord]) -> Iterator[EpisodeRecord | RolloutRecord]:
        """The records of index rows, read one at a time."""
        return (self.read(row) for row in rows)

    def read(self, row: IndexedRecord) -> EpisodeRecord | RolloutRecord:
        """One record, read by seeking to its line."""
        root = self.rollouts_root if row.kind == "rollouts" else self.root
        with open(root / row.file, "rb") as file:
            file.seek(row.offset)
            return _MODELS[row.kind].model_validate_json(file.read(row.length))

    def close(self) -> None:
        self._index.close()
        if self._rollouts_index is not self._index:
            self._rollouts_index.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _index_of(self, kind: str) -> sqlite3.Connection:
        return self._rollouts_index if kind == "rollouts" else self._index

    def _latest(self, kind: str, episode_id: str) -> IndexedRecord | None:
        row = (
            self._index_of(kind)
            .execute(
                f"SELECT {_COLUMNS} FROM records WHERE kind = ? AND episode_id = ? ORDER BY id DESC LIMIT 1",
                (kind, episode_id),
            )
            .fetchone()
        )
        return None if row is None else IndexedRecord(*row)

    @staticmethod
    def _open(root: Path) -> sqlite3.Connection:
        if not (root / INDEX).exists():
            raise ConfigError(
                f"no episode records in {root} (no {INDEX}): record with `corral serve BUNDLE "
                f"--record {root}`, `corral eval ... --record {root}` or CorralRollout(record_dir=...)"
            )
        return _connect(root)


def _where(
    kind: str,
    *,
    run: str | None = None,
    task: str | None = None,
    split: str | None = None,
    status: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
) -> tuple[str, list[Any]]:
    clauses: list[str] = ["kind = ?"]
    values: list[Any] = [kind]
    for clause, value in (
        ("task_id = ?", task),
        ("split = ?", split),
        ("status = ?", status),
        ("reward >= ?", min_reward),
        ("reward <= ?", max_reward),
    ):
        if value is not None:
            clauses.append(clause)
            values.append(value)
    if run is not None:  # a name, or its prefix
        clauses.append("substr(run, 1, ?) = ?")
        values += [len(run), run]
    return " AND ".join(clauses), values


_COLUMNS = "kind, episode_id, run, task_id, split, status, cause, reward, ended_at, file, offset, length"
