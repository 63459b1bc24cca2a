"""Many env hosts behind one trainer: `Bundle([url1, url2])` is one dataset whose episodes
spread over the hosts by their free sessions; a host killed mid-run ends its own episodes
unscored with the reason while the others are scored, and the run goes on on the hosts left;
a host that comes back is used again; hosts serving different bundles are refused."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from corral.client import Bundle
from corral.client.hosts import RETRY_S
from corral.errors import BundleMismatch
from tests.conftest import FIXTURES
from tests.proxies import loopback_proxy
from tests.servers import corral_serve, free_port, kill, stop, wait_until_serving

TOYBOX = FIXTURES / "toybox"
EPISODES = 16


@contextlib.contextmanager
def env_hosts(count: int, *options: str) -> Iterator[list]:
    """`count` servers of toybox, each `corral serve` in a process of its own (so it can be killed)."""
    servers = []
    try:
        for _ in range(count):
            port = free_port()
            servers.append((port, corral_serve(TOYBOX, port, "--sandbox", "local", *options)))
        yield [(wait_until_serving(server, port), port, server) for port, server in servers]
    finally:
        for _, server in servers:
            stop(server)


def start_episodes(environments, row) -> None:
    """Reset every environment at once and say the right word in each: 16 episodes in flight."""

    def start(environment) -> None:
        environment.reset(**row)
        assert environment.say(text="apple")  # the env's echo

    with ThreadPoolExecutor(len(environments)) as threads:
        list(threads.map(start, environments))


def hosts_of(environments) -> collections.Counter:
    return collections.Counter(environment._session.url for environment in environments)


def test_sixteen_episodes_spread_over_two_hosts_and_a_killed_host_costs_only_its_own():
    with env_hosts(2, "--max-concurrent-envs", str(EPISODES)) as hosts:
        (first, _, _), (second, _, second_server) = hosts
        with Bundle([first, second], split="toy") as env:
            row = env.dataset[0]
            environments = [env.factory() for _ in range(EPISODES)]
            start_episodes(environments, row)
            spread = hosts_of(environments)
            assert spread[first] >= 4 and spread[second] >= 4 and sum(spread.values()) == EPISODES, spread

            kill(second_server)  # mid-run: every episode has reset and acted, none has ended
            with ThreadPoolExecutor(EPISODES) as threads:
                rewards = list(threads.map(lambda environment: environment.get_reward(), environments))
            for environment, reward in zip(environments, rewards, strict=True):
                episode = environment._episode
                if environment._session.url == first:
                    assert (reward, episode.status) == (1.0, "scored")
                else:
                    assert (reward, episode.status) == (None, "unscored")
                    assert episode.reason.startswith("the server went away: ") and second in episode.reason
            assert rewards.count(1.0) == spread[first] and rewards.count(None) == spread[second]

            start_episodes(environments, row)  # the rest of the run: the live host only
            assert hosts_of(environments) == {first: EPISODES}
            with ThreadPoolExecutor(EPISODES) as threads:
                assert list(threads.map(lambda environment: environment.get_reward(), environments)) == [1.0] * EPISODES


def test_a_host_that_comes_back_is_used_again():
    with env_hosts(2, "--max-concurrent-envs", "8") as hosts:
        (first, _, _), (second, port, second_server) = hosts
        with Bundle([first, second], split="toy") as env:
            row = env.dataset[0]
            environments = [env.factory() for _ in range(8)]
            kill(second_server)
            start_episodes(environments, row)
            assert hosts_of(environments) == {first: 8}
            for environment in environments:
                assert environment.get_reward() == 1.0

            back = corral_serve(TOYBOX, port, "--sandbox", "local", "--max-concurrent-envs", "8")  # same port, same URL
            try:
                wait_until_serving(back, port)
                time.sleep(RETRY_S)  # a host out of the rotation is asked again this often
                start_episodes(environments, row)  # each reset may move to the host with more room
                spread = hosts_of(environments)
                assert spread[second] >= 3 and spread[first] >= 3, spread
                for environment in environments:
                    assert environment.get_reward() == 1.0
            finally:
                stop(back)


def test_a_reset_on_a_host_whose_sockets_fail_moves_to_another_host(serve):
    """The host with the most room answers /health, but its WebSockets fail (its server going
    away as the reset is sent): each reset plays on the other host instead."""
    roomy, small = serve(TOYBOX, max_concurrent_envs=8), serve(TOYBOX, max_concurrent_envs=2)
    sockets_fail = threading.Event()
    with (
        loopback_proxy(
            roomy.url, refuse=lambda request: sockets_fail.is_set() and request.startswith(b"GET /ws")
        ) as failing,
        Bundle([failing, small.url], split="toy") as env,
    ):
        sockets_fail.set()
        for _ in range(2):
            environment = env.factory()
            environment.reset(**env.dataset[0])
            assert environment._session.url == small.url
            assert environment.say(text="apple") and environment.get_reward() == 1.0


def test_hosts_that_serve_different_bundles_are_refused_naming_what_differs(serve):
    toybox, dockerbox = serve(TOYBOX), serve(FIXTURES / "dockerbox")
    with pytest.raises(BundleMismatch) as refused:
        Bundle([toybox.url, dockerbox.url], split="all")
    message = str(refused.value)
    assert message.startswith(
        f"the env hosts {toybox.url} and {dockerbox.url} serve different bundles (their names and versions differ"
    )
    assert message.endswith("serve the same bundle folder, at the same version, on every host")


def test_one_string_of_urls_separated_by_commas_is_the_same_hosts(serve):
    first, second = serve(TOYBOX), serve(TOYBOX)
    with Bundle(f"{first.url}, {second.url}/", split="toy") as env:
        assert env.urls == (first.url, second.url)
        assert len(env.dataset) == 1
