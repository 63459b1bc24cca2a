"""corral's harness_session_factory for TRL, the parts that need no server: it pickles (TRL's
worker is a spawned process), and a run of unscored episodes stops training with its causes."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

from corral.errors import ConfigError
from corral.training.harness import HarnessSessions, PlatformFailing, _last_user_text, _UnscoredStreak

pytestmark = pytest.mark.fast


def test_the_factory_pickles_as_trl_spawns_it() -> None:
    sessions = HarnessSessions("http://env-host:8000", llm_url="http://gpu-box:8000", model="m")
    assert pickle.loads(pickle.dumps(sessions)) == sessions
    with pytest.raises(ConfigError, match="names no model"):  # the agent's own name would pick the model
        HarnessSessions("http://env-host:8000", llm_url="http://gpu-box:8000")


def test_unscored_in_a_row_stops_training_naming_the_causes_and_a_scored_one_resets_the_count() -> None:
    streak = _UnscoredStreak(limit=3)
    unscored = SimpleNamespace(status="unscored", reason="the sandbox died")
    for _ in range(2):
        streak.count(unscored)
    streak.count(SimpleNamespace(status="scored", reason=None))
    streak.count(SimpleNamespace(status="failed", reason="the agent crashed"))  # the agent's fault: scored
    for _ in range(2):
        streak.count(unscored)
    with pytest.raises(PlatformFailing, match="3 harness episodes in a row .*the sandbox died; the engine gave no ids"):
        streak.count(SimpleNamespace(status="unscored", reason="the engine gave no ids"))
    assert isinstance(PlatformFailing("x"), ValueError)  # what TRL's worker stops on


def test_a_rollouts_task_is_found_by_its_prompts_last_user_message() -> None:
    prompt = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "first"},
        {"role": "user", "content": "fix it"},
    ]
    assert _last_user_text(prompt) == "fix it"
    assert _last_user_text("plain") == "plain" and _last_user_text([{"role": "system", "content": "s"}]) == ""
