"""Deadlines are the operator's: a client may ask for lower ones, never higher ones."""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from corral.client import Bundle
from tests.conftest import FIXTURES, serving

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


@pytest.fixture(scope="module")
def strict_server():
    yield from serving(FIXTURES / "toybox", tool_timeout_s=3)


def waited(bundle: Bundle, seconds: float) -> tuple[str, float]:
    """A 10 s call's answer, and how long it took to come back."""
    environment = bundle.factory()
    environment.reset(**bundle.dataset[0])
    started = time.monotonic()
    answer = environment.wait(seconds=seconds)
    elapsed = time.monotonic() - started
    assert environment.get_reward() == 0.0  # a missed deadline ends the episode: the agent's failure, scored 0
    return answer, elapsed


def test_the_metadata_states_the_limits_in_force(strict_server):
    metadata = httpx.get(f"{strict_server.url}/metadata", trust_env=False).json()
    assert (metadata["tool_timeout_s"], metadata["reset_timeout_s"]) == (3, 600)


def test_a_default_client_plays_under_the_servers_limit(strict_server):
    with Bundle(strict_server.url, split="toy") as bundle:
        answer, elapsed = waited(bundle, 10)
    assert "wait didn't answer within 3s" in answer
    assert elapsed < 9  # cut at the server's 3 s, not after the 10 s the tool sleeps


def test_a_client_may_lower_a_limit(strict_server):
    with Bundle(strict_server.url, split="toy", tool_timeout=1) as bundle:
        answer, _ = waited(bundle, 10)
    assert "wait didn't answer within 1s" in answer


def test_a_client_asking_for_more_gets_the_servers_limit_and_is_told(strict_server, caplog):
    with (
        Bundle(strict_server.url, split="toy", tool_timeout=10) as bundle,
        caplog.at_level(logging.WARNING, logger="corral.client"),
    ):
        answer, _ = waited(bundle, 10)
    assert "wait didn't answer within 3s" in answer
    assert "capped this episode's limits: tool_timeout_s=10 asked; the server's limit of 3s applies" in caplog.text
