"""The server's episode records: each ended episode's `EpisodeRecord`, written when asked
(`corral serve --record DIR`, or the bundle's `[serve] record = "DIR"`).

Writing happens on a thread of its own, in the order episodes end: a slow disk delays the
records, never a session. A server's run is one start of it; a restarted server adds a run
beside the last in the same folder (`corral.protocol.record_store` says how it is laid out).

A record keeps what its Python verifiers need to score it again (`corral rescore`): the env's
final report, up to REPORT_KEPT_BYTES of JSON, and the digest of each verifier that scored it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corral.protocol.record_store import RecordWriter
from corral.protocol.records import REPORT_KEPT_BYTES, EpisodeRecord

log = logging.getLogger("corral.server")


class EpisodeRecorder:
    """Writes the records of one server run into `root`; `digests` are the bundle's Python
    verifiers' (`verifier_digest`), by name."""

    def __init__(self, root: Path, bundle: str, digests: Mapping[str, str]):
        self.root = root
        self.digests = dict(digests)
        self._writer = RecordWriter(root, "episodes", source=bundle)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="corral-records")
        log.info("recording episodes in %s (run %s)", root, self._writer.run)

    @property
    def run(self) -> str:
        return self._writer.run

    def record(self, record: EpisodeRecord, verifiers: Mapping[str, str]) -> None:
        """Queue `record` to be written, with the digests of its Python `verifiers` ({score_id:
        name}); a record that cannot be written is logged, not raised."""
        digests = {score_id: self.digests[name] for score_id, name in verifiers.items()}
        self._thread.submit(self._write, record.model_copy(update={"verifier_digests": digests}))

    def close(self) -> None:
        """Write what is queued, then close the files."""
        self._thread.shutdown(wait=True)
        self._writer.close()

    def _write(self, record: EpisodeRecord) -> None:
        try:
            self._writer.write(_bounded(record))
        except Exception:
            log.exception("could not record episode %s in %s", record.episode_id, self.root)


def _bounded(record: EpisodeRecord) -> EpisodeRecord:
    """`record` without its report when the report is past REPORT_KEPT_BYTES of JSON, saying so."""
    if record.report is None:
        return record
    size = len(json.dumps(record.report, default=str).encode())
    if size <= REPORT_KEPT_BYTES:
        return record
    left_out = f"the env's report was {size} bytes of JSON, past the {REPORT_KEPT_BYTES} a record keeps"
    return record.model_copy(update={"report": None, "report_left_out": left_out})
