"""corral's harness_session_factory as TRL 1.16's HarnessRolloutWorker drives it, against a live
server of harnessbox (local sandbox) and the stand-in engine: the factory pickles, a rollout is
played in its own thread, its trace is OpenEnv's TrainingTrace and TRL's own trace-to-rows
functions train exactly what the engine sampled; close() from another thread ends a running
rollout at once."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from corral.training.harness import HarnessSessions
from tests.conftest import wait_until_none
from tests.harness_bundle import TEMPERATURE, Harness
from tests.harness_engine import MODEL
from tests.integration.test_harness_episodes import lingering

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def prompt(task: str) -> list[dict[str, str]]:
    """The dataset row's prompt TRL hands create(): the task's system prompt and prompt."""
    return [{"role": "system", "content": "Run the agent."}, {"role": "user", "content": f"{task}: answer, then stop."}]


def test_a_rollout_trains_what_the_engine_sampled_through_trls_own_functions(harness: Harness):
    from trl.experimental.async_grpo.openenv_harness import _chain_to_sequences, _turns_from_training_trace

    sessions = pickle.loads(pickle.dumps(HarnessSessions(harness.server.url, llm_url=harness.engine_url, model=MODEL)))
    factory = sessions(sampling={"temperature": TEMPERATURE, "top_p": 1.0})
    before = len(harness.engine.sampled)
    run = factory.create(prompt("three"), seed=5, episode_id="rollout-1")
    try:
        assert run.wait_for_completion(timeout_s=120) == 0
        trace = run.fetch_training_trace()
        assert run.verify([]).env_reward == 1.0
    finally:
        run.close()
    sampled = harness.engine.sampled[before:]
    assert len(sampled) == 3 and all(call.body["temperature"] == TEMPERATURE for call in sampled)
    rows, _ = _chain_to_sequences(_turns_from_training_trace(trace), "rollout-1", 0)
    assert len(rows) == 1  # three turns, each prompt extending the last: one row
    trained = [token for token, mask in zip(rows[0].input_ids, rows[0].completion_mask, strict=True) if mask]
    assert trained == [token for call in sampled for token in call.completion_token_ids]
    assert run.episode.final is not None and run.episode.final.metadata["capture"]["summary"]["calls"] == 3


def test_closing_a_running_rollout_from_another_thread_ends_it_and_its_agent(harness: Harness):
    factory = HarnessSessions(harness.server.url, llm_url=harness.engine_url, model=MODEL)()
    run = factory.create(prompt("linger"))  # its agent would sleep 600 s; its limit is 8 s
    deadline = time.monotonic() + 30
    while not lingering() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lingering(), "the agent never started"
    began = time.monotonic()
    closing = threading.Thread(target=run.close)  # as TRL's worker closes every session on stop
    closing.start()
    assert run.wait_for_completion(timeout_s=15) == 1  # ended, not scored
    closing.join(15)
    assert time.monotonic() - began < 5  # well before its 8 s limit would have ended it
    assert run.episode.status == "unscored"
    assert wait_until_none(lingering, 10) == []
