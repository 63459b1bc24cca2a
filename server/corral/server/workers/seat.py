"""What one worker of `corral serve --workers N` shares with the others: the host's session
count (each worker writes its own slot, every worker reads them all), each worker's pid, and
the folder of their private Unix sockets (how one asks the others for their /metrics, and
passes on a request for a session another holds: workers.forward), and the session ids that
name the worker holding them.

Shared memory the supervisor made (workers.py), not a lock: a worker killed while holding a
lock would stop every other. Without one, workers opening their last free slots at the same
instant may pass the host's limit by at most one session each.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import MutableSequence
from dataclasses import dataclass

_MARKED = re.compile(r"[0-9a-f]{32}-w([0-9]{1,4})")  # mint's ids: 128 random bits, then the worker
SOCKET_NAME = re.compile(r"worker-([0-9]{1,4})\.sock")  # socket_name's


def socket_name(index: int) -> str:
    """Worker `index`'s private socket, in the workers' folder."""
    return f"worker-{index}.sock"


@dataclass
class WorkerSeat:
    """Worker `index`'s place among the host's workers."""

    index: int
    sessions: MutableSequence[int]  # per worker: its open sessions (0 for a worker that died)
    pids: MutableSequence[int]  # per worker: its pid once it serves (0 while none does)
    folder: str  # the workers' private sockets, in a folder only this user may enter

    def socket_path(self, index: int) -> str:
        return os.path.join(self.folder, socket_name(index))

    def host_sessions(self) -> int:
        return sum(self.sessions)

    def count_own(self, open_sessions: int) -> None:
        self.sessions[self.index] = open_sessions

    def serving(self) -> None:
        self.pids[self.index] = os.getpid()

    def mint(self) -> str:
        """A new session id, naming this worker (so any worker can pass its requests on here)."""
        return f"{uuid.uuid4().hex}-w{self.index}"

    def holder(self, session_id: object) -> int | None:
        """The other worker whose session `session_id` names; None for one of this worker's, or
        an id no worker of this host minted (this worker answers it: an unknown session)."""
        marked = _MARKED.fullmatch(session_id) if isinstance(session_id, str) else None
        if marked is None:
            return None
        index = int(marked[1])
        return index if index != self.index and index < len(self.pids) else None

    def workers(self) -> list[dict[str, int]]:
        """Each worker's pid and open sessions, for /health."""
        return [{"pid": pid, "sessions": sessions} for pid, sessions in zip(self.pids, self.sessions, strict=True)]
