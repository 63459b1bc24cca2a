"""Many env hosts behind one trainer: which host a session opens on.

`Bundle(["http://a:8000", "http://b:8000"])` (or `"http://a:8000,http://b:8000"`) serves one
dataset from hosts that serve the same bundle. Each session picks its host when it connects,
and again at each reset (between episodes, the only moment it may move): the host with the
most free sessions, as its `GET /health` says (`max_sessions - sessions`), less the sessions
this process has opened there since it last asked. A session stays where it is unless another
host has more room.

A host that stops answering (a refused connection, a socket closed mid-request, a health
check unanswered) is out of the rotation at once: its open episodes end unscored with the
reason, the others go on, and new sessions go to the hosts left. A watcher thread asks it again
every RETRY_S; once it answers it is used again. The hosts of one process are shared by all its sessions (one `Hosts` per host list and
token), so the spreading sees every environment a trainer holds.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar

import httpx

from corral.errors import ServerUnreachable

log = logging.getLogger("corral.client")

REFRESH_S = 1.0  # how old a live host's health may be before a pick asks again
SETTLE_S = 0.5  # a session opened or closed this long before a health check is in its count
RETRY_S = 2.0  # how often a host out of the rotation is asked whether it is back
HEALTH_TIMEOUT_S = 2.0


@dataclass
class Host:
    url: str
    alive: bool = True
    sessions: int = 0
    max_sessions: int = 1
    # (when, +1 or -1): sessions this process sent here or moved away, which the host's last
    # health report may not count yet
    moves: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)
    checked: float = field(default=float("-inf"))  # monotonic time of the last check

    @property
    def free(self) -> int:
        return self.max_sessions - self.sessions - sum(change for _, change in self.moves)

    def moved(self, change: int) -> None:
        self.moves.append((time.monotonic(), change))

    def reported(self, sessions: int, max_sessions: int, at: float) -> None:
        """A health report asked for at `at`: it counts the moves made well before."""
        self.sessions, self.max_sessions = sessions, max_sessions
        while self.moves and self.moves[0][0] < at - SETTLE_S:
            self.moves.popleft()


class Hosts:
    """The env hosts of one host list, shared by every session of this process that uses it."""

    _shared: ClassVar[dict[tuple[tuple[str, ...], str | None], Hosts]] = {}
    _shared_lock = threading.Lock()

    def __init__(self, urls: tuple[str, ...], token: str | None):
        self.hosts = {url: Host(url) for url in urls}
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._lock = threading.Lock()  # the hosts' state
        self._asking = threading.Lock()  # one thread asks the live hosts; the others wait for its answers
        self._watcher: threading.Thread | None = None

    @classmethod
    def of(cls, urls: tuple[str, ...], token: str | None) -> Hosts:
        with cls._shared_lock:
            key = (urls, token)
            if key not in cls._shared:
                cls._shared[key] = cls(urls, token)
            return cls._shared[key]

    def pick(self, current: str | None = None, *, avoid: frozenset[str] = frozenset()) -> str:
        """The host a session should be on: the one with the most free sessions (`current`,
        where the session is now, counts its own as free and wins a tie). Raises
        ServerUnreachable when no host answers."""
        self._ask_live_hosts()
        with self._lock:
            live = [host for host in self.hosts.values() if host.alive and host.url not in avoid]
            if not live:
                raise ServerUnreachable(
                    f"none of the env hosts answers ({', '.join(self.hosts)}); start them (`corral serve BUNDLE`, "
                    "or compose on each), or check the URLs"
                )
            best = max(live, key=lambda host: (host.free + (host.url == current), host.url == current))
            if best.url != current:
                best.moved(+1)
                if current in self.hosts:  # the session leaves its old host: one more free there
                    self.hosts[current].moved(-1)
            return best.url

    def lost(self, url: str) -> None:
        """A session on `url` lost its server (or could not reach it): the next pick asks the
        host first, and leaves it out unless it answers."""
        with self._lock:
            if url in self.hosts:
                self.hosts[url].checked = float("-inf")

    def _ask_live_hosts(self) -> None:
        """Ask each live host whose news is older than REFRESH_S for its health. One that does
        not answer leaves the rotation; a watcher thread asks it again every RETRY_S, so no
        pick waits on a host that is down."""
        with self._asking:
            for host in [h for h in self.hosts.values() if h.alive and time.monotonic() - h.checked > REFRESH_S]:
                if not self._ask(host):
                    log.warning("env host %s does not answer: out of the rotation until it does", host.url)
                    self._watch()

    def _ask(self, host: Host) -> bool:
        asked = time.monotonic()
        health = self._health(host.url)
        with self._lock:
            host.checked, host.alive = asked, health is not None
            if health is not None:
                host.reported(*health, at=asked)
        return health is not None

    def _watch(self) -> None:
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(target=self._ask_the_lost, name="corral-hosts", daemon=True)
            self._watcher.start()

    def _ask_the_lost(self) -> None:
        """Every RETRY_S, ask the hosts out of the rotation; end once every host is back."""
        while lost := [host for host in self.hosts.values() if not host.alive]:
            time.sleep(RETRY_S)
            for host in lost:
                if self._ask(host):
                    log.warning("env host %s answers again: back in the rotation", host.url)

    def _health(self, url: str) -> tuple[int, int] | None:
        try:
            reply = httpx.get(f"{url}/health", headers=self._headers, timeout=HEALTH_TIMEOUT_S, trust_env=False)
            body = reply.json()
            return int(body["sessions"]), int(body["max_sessions"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None
