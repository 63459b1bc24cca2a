"""An environment class records each episode it plays (`Bundle(url, record_dir=...)`), joined by
episode id to the server's record; under TRL's AsyncGRPO rollout loop each record also names its
group, its index there and the policy version (`corral.client.rollout_place`). The loop here is
TRL's own class, held by the main thread's frame as `_child_main` holds it; tests/vllm plays the
whole rollout process against real vLLM."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from corral.client import Bundle, rollout_place
from corral.client.environment_records import trl_advantages
from corral.protocol.record_store import EpisodeStore
from tests.conftest import BUNDLES

pytestmark = pytest.mark.trl
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_an_environment_records_its_episode_beside_the_servers_and_outside_a_run_names_no_place(
    serve, tmp_path: Path
) -> None:
    server = serve(BUNDLES / "gridsim", record_dir=tmp_path / "records")
    with Bundle(server.url, record_dir=tmp_path / "records") as bundle:
        environment = bundle.factory()
        environment.reset(**bundle.dataset[0])
        environment.submit_schedule(actions="all night")  # refused: not a list of integers
        reward = environment.get_reward()
        environment.get_reward()  # asked twice, recorded once
        episode_id = environment._episode.opened.episode_id
    with EpisodeStore(tmp_path / "records") as store:
        assert store.episode(episode_id).reward == reward  # the server's record of the same episode
        rollout = store.rollout(episode_id)
        assert len(store.find(kind="rollouts")) == 1
    assert rollout is not None
    assert rollout.reward == reward and rollout.task_id == bundle.dataset[0]["task_id"]
    assert (rollout.tool_calls, rollout.tool_errors) == (1, 1)
    assert (rollout.step, rollout.group, rollout.group_index, rollout.policy_version) == (None,) * 4


def test_under_trls_async_rollout_loop_each_episode_takes_its_place_in_trls_groups(
    serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = _stand_in_loop(monkeypatch, num_generations=3, version=4)
    server = serve(BUNDLES / "gridsim", max_concurrent_envs=2)
    with Bundle(server.url, record_dir=tmp_path) as bundle:
        environments = [bundle.factory(), bundle.factory()]
        row = bundle.dataset[0]

        def run(self: Any) -> list:  # the main thread's frame holds the loop, as in TRL's child
            places = []
            with ThreadPoolExecutor(1) as tools:  # TRL resets in its tool pool, one reset at a time
                for number in range(7):
                    if number == 4:
                        self._model_version_value.value = 5  # a sync in the middle of group 1
                    environment = environments[number % 2]
                    tools.submit(environment.reset, **row).result()
                    places.append(environment._place)
                    tools.submit(environment.get_reward).result()
            return places

        places = run(loop)
    assert [(place.group, place.group_index) for place in places] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
    ]
    # TRL reads the version once per group, at its first reset: group 1 keeps 4 through the sync
    assert [place.policy_version for place in places] == [4, 4, 4, 4, 4, 4, 5]
    assert [place.step for place in places] == [place.policy_version for place in places]
    with EpisodeStore(tmp_path) as store:  # the groups TRL scored, written whole; group 2 is not complete
        records = list(store.records(store.find(kind="rollouts")))
    assert sorted((r.group, r.group_index, r.policy_version) for r in records) == [
        (p.group, p.group_index, p.policy_version) for p in places[:6]
    ]
    assert all(record.advantage == 0.0 for record in records)  # gridsim scores every idle day alike


@pytest.mark.parametrize(
    "rewards", [[1.0, 0.0, 0.5, 0.5], [1.0, None, 0.0, 1.0], [None, None, None, None], [0.2, 0.2, 0.2, 0.2]]
)
def test_the_recorded_advantages_are_those_trl_computes_for_the_group(rewards: list[float | None]) -> None:
    from accelerate import PartialState
    from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, _AsyncRolloutLoop

    PartialState()  # TRL's scoring logs through accelerate, as in its rollout process
    loop = object.__new__(_AsyncRolloutLoop)  # what TRL's scoring reads: one environment reward, no function
    loop.reward_funcs, loop.reward_func_names, loop._env_reward_types = [], ["Bundle"], [Bundle]
    n = len(rewards)
    group = RolloutGroup(
        prompts=[[]] * n,
        reward_kwargs={},
        completions=[[]] * n,
        completions_ids=[[]] * n,
        completions_sequences=[[_Sequence()] for _ in rewards],
        tool_call_counts=[0] * n,
        tool_failure_counts=[0] * n,
        model_version=0,
        group_id=0,
        env_rewards=[(Bundle, reward) for reward in rewards],
        rollout_rewards=[None] * n,
    )
    samples = asyncio.run(loop._score_group(group))
    assert trl_advantages(rewards) == pytest.approx([sample.advantage for sample in samples], abs=1e-6)


class _Sequence:
    input_ids, completion_mask, old_log_probs = [1], [1], [0.0]


def _stand_in_loop(monkeypatch: pytest.MonkeyPatch, *, num_generations: int, version: int) -> Any:
    """TRL's own loop class, holding only what the place is read from."""
    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

    monkeypatch.setattr(rollout_place, "_loop", None)
    monkeypatch.setattr(rollout_place, "_resets", 0)
    loop = object.__new__(_AsyncRolloutLoop)
    loop.num_generations, loop.reward_funcs = num_generations, []
    loop._model_version_value = multiprocessing.Value("i", version)
    return loop
