"""The server's episode records: each ended episode's `EpisodeRecord`, written when asked
(`corral serve --record DIR`, or the bundle's `[serve] record = "DIR"`).

Writing happens on a thread of its own, in the order episodes end: a slow disk delays the
records, never a session. A server's run is one start of it; a restarted server adds a run
beside the last in the same folder (`corral.protocol.record_store` says how it is laid out).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corral.protocol.record_store import RecordWriter
from corral.protocol.records import EpisodeRecord

log = logging.getLogger("corral.server")


class EpisodeRecorder:
    """Writes the records of one server run into `root`."""

    def __init__(self, root: Path, bundle: str):
        self.root = root
        self._writer = RecordWriter(root, "episodes", source=bundle)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="corral-records")
        log.info("recording episodes in %s (run %s)", root, self._writer.run)

    @property
    def run(self) -> str:
        return self._writer.run

    def record(self, record: EpisodeRecord) -> None:
        """Queue `record` to be written; a record that cannot be written is logged, not raised."""
        self._thread.submit(self._write, record)

    def close(self) -> None:
        """Write what is queued, then close the files."""
        self._thread.shutdown(wait=True)
        self._writer.close()

    def _write(self, record: EpisodeRecord) -> None:
        try:
            self._writer.write(record)
        except Exception:
            log.exception("could not record episode %s in %s", record.episode_id, self.root)
