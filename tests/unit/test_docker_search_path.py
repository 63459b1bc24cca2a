"""docker.whole_image.search_path: which of a Harbor task's search lists are judged for the agent's reach
(the image's), which are kept as the task chose them (its `[verifier] env`), and where the agent
is root, none (tests/docker/test_harbor_attacks.py plays the attacks)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from corral.sandboxes.docker.whole_image import search_path as docker_search_path

IMAGE_ENV = ["PATH=/home/worker/.local/bin:/usr/bin", "PYTHONPATH=/app/lib", "LANG=C.UTF-8"]


class Engine:
    def __init__(self, user: str, env: list[str] = IMAGE_ENV):
        self.api = SimpleNamespace(inspect_image=lambda image: {"Config": {"Env": env, "User": user}})

    async def call(self, function, *args):
        return function(*args)


@pytest.fixture
def judged(monkeypatch) -> list[dict]:
    """The lists handed to the reach check, which here finds every folder within reach."""
    seen: list[dict] = []

    async def out_of_reach(engine, keeper, agent, lists, workdir):
        seen.append(dict(lists))
        return {key: "" for key in lists}, [folder for value in lists.values() for folder in value.split(":")]

    async def python_path(engine, keeper, path):
        return ["/usr/lib/python3.11"]

    monkeypatch.setattr(docker_search_path, "out_of_reach", out_of_reach)
    monkeypatch.setattr(docker_search_path, "_python_path", python_path)
    return seen


def search(user: str, overrides: dict[str, str], changed=(), env=IMAGE_ENV) -> docker_search_path.SearchPath:
    config = {"user": "", "environment": {}, "working_dir": "/app"}
    engine = Engine(user, env)
    return asyncio.run(docker_search_path.for_the_tests(engine, "commit", "keeper", config, overrides, changed))


def test_the_image_s_lists_are_judged_and_the_task_s_own_choice_is_kept(judged):
    found = search("worker", {"PYTHONPATH": "/app"})

    assert judged == [{"PATH": "/home/worker/.local/bin:/usr/bin"}]
    assert found.environment == {"PATH": ""} and "PYTHONPATH" not in found.environment


def test_a_change_in_the_tests_python_folders_is_found_but_not_its_bytecode_cache(judged):
    changed = [
        {"Path": "/usr/lib/python3.11/__pycache__/x.pyc", "Kind": 1},
        {"Path": "/usr/lib/python3.11/x.pth", "Kind": 1},
        {"Path": "/usr/lib/python3.11-other/y.py", "Kind": 1},
        {"Path": "/usr/lib/python3.11/gone.py", "Kind": 2},
    ]

    assert search("worker", {}, changed).planted == ["/usr/lib/python3.11/x.pth"]


@pytest.mark.parametrize("user", ["", "root", "0:0"])
def test_nothing_is_judged_where_the_agent_is_root(judged, user):
    assert search(user, {}) == docker_search_path.SearchPath(agent=user or "root") and judged == []


STARTUP_ENV = ["LD_PRELOAD=/home/worker/x.so", "PYTEST_ADDOPTS=-p plug", "BASH_FUNC_f%%=() { :; }", "LANG=C.UTF-8"]


@pytest.mark.parametrize("user", ["worker", "root"])
def test_the_image_s_start_up_variables_are_set_empty_whoever_the_agent_is(judged, user):
    found = search(user, {}, env=STARTUP_ENV)

    assert found.emptied == ["BASH_FUNC_f%%", "LD_PRELOAD", "PYTEST_ADDOPTS"]
    assert {key: found.environment[key] for key in found.emptied} == dict.fromkeys(found.emptied, "")
    assert "LANG" not in found.environment


def test_a_start_up_variable_the_task_sets_is_its_own(judged):
    assert search("worker", {"PYTEST_ADDOPTS": "-x"}, env=STARTUP_ENV).emptied == ["BASH_FUNC_f%%", "LD_PRELOAD"]


def test_another_variable_is_judged_by_the_paths_it_names(judged):
    env = ["JAVA_HOME=/home/worker/jdk", "OPTS=-Dlog=/var/log/x -q", "LC_ALL=/x", "TERM=xterm", "COLOR=blue"]
    found = search("worker", {}, env=env)

    assert judged == [{"JAVA_HOME": "/home/worker/jdk", "OPTS": "/var/log/x"}]
    assert found.emptied == ["JAVA_HOME", "OPTS"] and found.left_off == []
