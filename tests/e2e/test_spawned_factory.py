"""The AsyncGRPO path: `trl.experimental.async_grpo` pickles `environment_factory` into a process it
starts with `mp.get_context("spawn")`, and every environment lives there. Here a `Bundle(url)`'s
factory crosses into such a process and plays whole episodes against a server in this one."""

from __future__ import annotations

import multiprocessing
import pickle
from typing import Any

import pytest

from corral.client import Bundle
from tests.conftest import FIXTURES

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def play(pickled_factory: bytes, row: dict[str, Any], words: list[str]) -> list[float | None]:
    """In the spawned process: build one environment and play the row once per word, saying the
    word, as a rollout worker reuses a pooled environment; return each episode's reward."""
    environment = pickle.loads(pickled_factory)()
    rewards = []
    for word in words:
        environment.reset(**row)
        environment.say(text=word)
        rewards.append(environment.get_reward())
    return rewards


def test_a_pickled_factory_plays_whole_episodes_in_a_spawned_process() -> None:
    with (
        Bundle.local(FIXTURES / "toybox", split="toy", sandbox="local") as served,
        Bundle(served.url, split="toy") as env,  # as a trainer opens a remote server
        multiprocessing.get_context("spawn").Pool(1) as pool,
    ):
        rewards = pool.apply(play, (pickle.dumps(env.factory), env.dataset[0], ["apple", "pear"]))

    # The task is "Say apple.": the server's verifier scores the first episode 1, the second 0.
    assert rewards == [1.0, 0.0]
