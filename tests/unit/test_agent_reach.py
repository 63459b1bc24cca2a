"""corral.env.agent.within_reach: which folders the agent's user could put a module in, so that
corral's runtime leaves them off the env's import path (tests/docker/test_adversary_identity.py
plays the attack in a container). Here the agent is a made-up uid in this user's group, or
this user itself."""

from __future__ import annotations

import importlib
import importlib.util
import os
import py_compile
import sys
from pathlib import Path

import pytest

from corral.env import agent, imports, runtime

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


@pytest.fixture
def guarded(agent_in_my_group, monkeypatch, tmp_path):
    """The runtime's import guard on a copy of the import machinery, with `tmp_path/lib` on the path."""
    lib = folder(tmp_path / "lib", 0o755)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(sys, "path", [str(lib), *sys.path])
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    imports.guard()
    return lib


def test_a_module_in_a_package_folder_the_agent_may_write_in_is_not_imported(guarded):
    (folder(guarded / "pkg", 0o775) / "planted.py").write_text("WHO = 'agent'\n")
    (folder(guarded / "kept", 0o755) / "own.py").write_text("WHO = 'env'\n")

    with pytest.raises(ImportError, match="the agent's commands may write there"):
        importlib.import_module("pkg.planted")
    assert importlib.import_module("kept.own").WHO == "env"


def test_stale_bytecode_the_agent_could_write_beside_a_module_is_never_run(guarded):
    source = guarded / "victim.py"
    source.write_text("WHO = 'forged'\n")
    py_compile.compile(str(source), doraise=True)  # bytecode of the agent's code...
    written = source.stat().st_mtime_ns
    source.write_text("WHO = 'source'\n")  # ...beside the env's source of the same size and time
    os.utime(source, ns=(written, written))
    Path(importlib.util.cache_from_source(str(source))).parent.chmod(0o775)

    with pytest.raises(ImportError, match="__pycache__"):
        importlib.import_module("victim")
