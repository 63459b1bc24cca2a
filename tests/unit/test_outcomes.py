"""How an episode ends is said in one vocabulary (corral.protocol.outcomes), which the server's
endings, the frames and the records all use."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.protocol.frames import EpisodeState
from corral.protocol.outcomes import CAUSES, STATUSES
from corral.protocol.records import EpisodeRecord
from corral.server.episodes.endings import ENDINGS


def test_every_cause_but_scored_is_an_ending_the_server_judges():
    assert list(ENDINGS) == [cause for cause in CAUSES if cause != "scored"]
    assert all(ending.cause == cause for cause, ending in ENDINGS.items())


@pytest.mark.parametrize("status", STATUSES)
def test_the_frames_and_the_records_carry_every_status(status):
    assert EpisodeState(status=status).status == status
    assert EpisodeRecord(episode_id="e", task_id="t", cause="scored", status=status).status == status


def test_a_status_outside_the_vocabulary_is_refused_where_it_is_read():
    with pytest.raises(ValidationError):
        EpisodeState.model_validate({"status": "passed"})
    with pytest.raises(ValidationError):
        EpisodeRecord.model_validate({"episode_id": "e", "task_id": "t", "cause": "scored", "status": "passed"})
