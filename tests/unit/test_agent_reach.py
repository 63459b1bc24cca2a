"""corral.env.agent.within_reach: which folders the agent's user could put a module in, so that
corral's runtime leaves them off the env's import path (tests/docker/test_adversary_identity.py
plays the attack in a container). Here the agent is a made-up uid in this user's group, or
this user itself."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from corral.env import agent, runtime

OTHER_UID = 64001  # no account of this machine's


@pytest.fixture
def agent_in_my_group(monkeypatch):
    monkeypatch.setattr(agent, "_agent", (OTHER_UID, os.getgid()))


def folder(path: Path, mode: int) -> Path:
    path.mkdir()
    path.chmod(mode)
    return path


@pytest.mark.parametrize(("mode", "reached"), [(0o755, False), (0o775, True), (0o757, True), (0o1777, True)])
def test_a_folder_the_agent_may_write_in_is_within_its_reach(agent_in_my_group, tmp_path, mode, reached):
    assert agent.within_reach(str(folder(tmp_path / "lib", mode))) is reached


def test_a_folder_of_the_env_s_under_a_sticky_one_is_not_but_a_missing_one_is(agent_in_my_group, tmp_path):
    shared = folder(tmp_path / "shared", 0o1777)
    kept = folder(shared / "kept", 0o755)

    assert (agent.within_reach(str(kept)), agent.within_reach(str(shared / "missing" / "lib"))) == (False, True)


def test_a_folder_under_one_the_agent_may_write_in_or_reached_by_a_link_from_there_is(agent_in_my_group, tmp_path):
    writable = folder(tmp_path / "writable", 0o775)
    inside = folder(writable / "lib", 0o755)
    kept = folder(tmp_path / "kept", 0o755)
    (kept / "link").symlink_to(inside)

    assert (agent.within_reach(str(inside)), agent.within_reach(str(kept / "link"))) == (True, True)
    assert agent.within_reach(str(kept)) is False


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a folder to another user: needs root")
def test_what_the_agent_owns_is_within_reach_and_the_standard_library_is_not(monkeypatch, tmp_path):
    monkeypatch.setattr(agent, "_agent", (OTHER_UID, 64000))
    owned = folder(tmp_path / "owned", 0o755)
    os.chown(owned, OTHER_UID, 64000)
    monkeypatch.chdir(owned)

    assert (agent.within_reach(""), agent.within_reach(os.path.dirname(os.__file__))) == (True, False)


def test_with_no_user_of_its_own_nothing_is_within_the_agent_s_reach(tmp_path):
    assert agent.within_reach(str(folder(tmp_path / "open", 0o777))) is False


def test_the_runtime_leaves_the_agent_s_folders_off_the_import_path(monkeypatch, tmp_path):
    monkeypatch.setattr(agent, "_agent", (OTHER_UID, os.getgid()))
    writable, kept = folder(tmp_path / "writable", 0o775), folder(tmp_path / "kept", 0o755)
    monkeypatch.setattr(sys, "path", [str(writable), str(kept), *sys.path])

    runtime._imports_out_of_the_agents_reach()

    assert str(writable) not in sys.path and str(kept) in sys.path
