"""What ended an episode, as the client's `Episode` reads it: the server's cause and seconds from
the ending observation's metadata, or the client's own cause where the client ended it."""

from __future__ import annotations

from typing import Any

from corral.client import Episode
from corral.client.episode import SERVER_LOST
from corral.errors import SessionLost
from corral.protocol.frames import CallToolObservation, Limits, ObservationReply, ResetData, ResetObservation

LIMITS = Limits(tool_timeout_s=5, reset_timeout_s=5)
SECONDS = {"start": 0.1, "reset": 0.2, "tools": 0.3, "verify": 0.4, "total": 1.5}


class Replies:
    """A session that answers each request with the next of `replies` (an exception is raised)."""

    url = "ws://127.0.0.1:1/ws"

    def __init__(self, *replies: Any):
        self.replies = list(replies)

    def request(self, frame: Any, timeout: float) -> Any:
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return ObservationReply.of(reply)


OPENED = ResetObservation(task_id="t", episode_id="e", offered_tools=[])


def scored(**metadata: Any) -> CallToolObservation:
    return CallToolObservation(
        tool_name="end_turn", done=True, reward=1.0, status="scored", scores={"said": 1.0}, metadata=metadata
    )


def played(session: Replies, **kwargs: Any) -> Episode:
    episode = Episode(session, LIMITS, **kwargs)  # type: ignore[arg-type]
    episode.start(ResetData(task_id="t"))
    episode.end_turn("done")
    return episode


def test_the_client_reads_the_servers_cause_and_seconds_from_the_ending():
    episode = played(Replies(OPENED, scored(cause="scored", seconds=SECONDS)))
    assert (episode.status, episode.cause, episode.seconds) == ("scored", "scored", SECONDS)


def test_an_ending_the_client_saw_alone_names_its_own_cause():
    lost = played(Replies(OPENED, SessionLost("the socket closed")))
    assert (lost.status, lost.cause, lost.seconds) == ("unscored", SERVER_LOST, {})
    unpicked = played(Replies(OPENED, scored(cause="scored", seconds=SECONDS)), reward="style")
    assert (unpicked.status, unpicked.reward, unpicked.cause) == ("unscored", None, "reward_failed")


def test_an_ending_from_a_server_that_names_no_cause_says_none():
    episode = played(Replies(OPENED, scored()))
    assert (episode.status, episode.cause, episode.seconds) == ("scored", None, {})
