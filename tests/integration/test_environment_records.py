"""An environment class records each episode it plays (`Bundle(url, record_dir=...)`), joined by
episode id to the server's record; under TRL's AsyncGRPO rollout loop each record also names its
group, its index there and the policy version (`corral.client.rollout_place`). The loop here is
TRL's own class, held by the main thread's frame as `_child_main` holds it; tests/vllm plays the
whole rollout process against real vLLM."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from corral.client import Bundle, rollout_place
from corral.client.record_store import EpisodeStore
from tests.conftest import BUNDLES

pytestmark = pytest.mark.trl


def test_an_environment_records_its_episode_beside_the_servers_and_outside_a_run_names_no_place(
        serve, tmp_path: Path) -> None:
    server = serve(BUNDLES / "gridsim", record_dir=tmp_path / "records")
    with Bundle(server.url, record_dir=tmp_path / "records") as bundle:
        environment = bundle.factory()
        environment.reset(**bundle.dataset[0])
        reward = environment.get_reward()
        environment.get_reward()  # asked twice, recorded once
        episode_id = environment._episode.opened.episode_id
    with EpisodeStore(tmp_path / "records") as store:
        assert store.episode(episode_id).reward == reward  # the server's record of the same episode
        rollout = store.rollout(episode_id)
        assert len(store.find(kind="rollouts")) == 1
    assert rollout is not None
    assert rollout.reward == reward and rollout.task_id == bundle.dataset[0]["task_id"]
    assert (rollout.step, rollout.group, rollout.group_index, rollout.policy_version) == (None,) * 4


def test_under_trls_async_rollout_loop_each_reset_takes_the_next_place_in_trls_groups(
        serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

    monkeypatch.setattr(rollout_place, "_loop", None)
    monkeypatch.setattr(rollout_place, "_resets", 0)
    loop = object.__new__(_AsyncRolloutLoop)  # only what the place is read from: its group size and version
    loop.num_generations = 3
    loop._model_version_value = multiprocessing.Value("i", 4)
    server = serve(BUNDLES / "gridsim", max_concurrent_envs=2)
    with Bundle(server.url) as bundle:
        environments = [bundle.factory(), bundle.factory()]
        row = bundle.dataset[0]

        def run(self: _AsyncRolloutLoop) -> list:  # the main thread's frame holds the loop, as in TRL's child
            places = []
            with ThreadPoolExecutor(1) as tools:  # TRL resets in its tool pool, one reset at a time
                for number in range(7):
                    if number == 4:
                        self._model_version_value.value = 5  # a sync in the middle of group 1
                    environment = environments[number % 2]
                    tools.submit(environment.reset, **row).result()
                    places.append(environment._place)
            return places

        places = run(loop)
    assert [(place.group, place.group_index) for place in places] == \
        [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0)]
    # TRL reads the version once per group, at its first reset: group 1 keeps 4 through the sync
    assert [place.policy_version for place in places] == [4, 4, 4, 4, 4, 4, 5]
    assert [place.step for place in places] == [place.policy_version for place in places]
