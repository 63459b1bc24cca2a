"""A container's removal returns once the container is gone, even when another removal of it
(the engine's own, or a reaper's beside a sandbox's close) is under way: the engine answers
that one with 409 while it still lists the container."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from corral.sandboxes.docker import engine as docker_engine
from corral.sandboxes.docker.engine import remove_container


def api_error(status: int) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    kind = docker.errors.NotFound if status == 404 else docker.errors.APIError
    return kind(f"{status}", response=response, explanation=f"answered {status}")


class Engine:
    """Answers each removal with the next of `answers` (an error to raise, or None for done)
    and lists the container until a removal is done or answered 404."""

    def __init__(self, *answers: int | None) -> None:
        self.answers = list(answers)
        self.listed = True
        self.calls = 0

    def remove_container(self, container: str, force: bool, v: bool) -> None:
        self.calls += 1
        status = self.answers.pop(0)
        if status in (None, 404):
            self.listed = False
        if status is not None:
            raise api_error(status)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(docker_engine, "REMOVE_RETRY_S", 0)
    monkeypatch.setattr(docker_engine, "REMOVAL_POLL_S", 0)


def test_a_removal_under_way_already_is_waited_for_until_the_container_is_gone():
    engine = Engine(409, 409, 409, 409, 404)
    remove_container(engine, "c1")  # type: ignore[arg-type]
    assert not engine.listed and engine.calls == 5


def test_a_removal_under_way_that_never_ends_is_an_error(monkeypatch):
    monkeypatch.setattr(docker_engine, "REMOVAL_UNDER_WAY_S", 0)
    engine = Engine(409, 409, 409)
    with pytest.raises(docker.errors.APIError, match="409"):
        remove_container(engine, "c1")  # type: ignore[arg-type]
    assert engine.calls == 3


def test_a_failed_kill_is_tried_again_and_a_removed_container_is_fine():
    engine = Engine(500, None)
    remove_container(engine, "c1")  # type: ignore[arg-type]
    assert not engine.listed and engine.calls == 2
