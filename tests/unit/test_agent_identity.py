"""corral.env.agent, as the docker sandbox uses it (tests/docker/test_agent_identity.py plays it
in a real container), here in a process started as root on this machine; and the container
settings that give an env's agent a user of its own, and only a corral env's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import docker
import pytest

from corral.env.agent import AGENT_USER_VARIABLE, ENV_USER_VARIABLE
from corral.sandboxes import SandboxSpec
from corral.sandboxes.docker.sandbox import container_config
from corral.sandboxes.docker.verify import fresh_container_config
from corral.sandboxes.shared.pristine import startup_emptied
from corral.sandboxes.shared.users import AGENT_USER, ENV_USER, process_users

SDK = Path(__file__).resolve().parents[2] / "sandboxes"
ENV_UID, AGENT_UID, GID = 64000, 64001, 64000  # no account of this machine's
# What corral's runtime does first (take_identity), then what an env does for its agent.
AS_THE_ENV = """
import os, subprocess, sys
from corral.env import agent
agent.take_identity()
print(os.getuid(), os.getgid(), os.getgroups())
child = agent.popen(["sh", "-c", "id -u; id -g; id -G; grep -E '^Cap(Prm|Eff)' /proc/self/status"], stdout=subprocess.PIPE)
print(child.communicate()[0].decode(), end="")
with agent.files():
    open(sys.argv[1] + "/made", "w").close()
print(os.stat(sys.argv[1] + "/made").st_uid)
open(sys.argv[1] + "/mine", "w").close()
print(os.stat(sys.argv[1] + "/mine").st_uid)
"""


def as_the_env(folder: Path, **variables: str) -> list[str]:
    environment = {"PATH": os.environ["PATH"], "PYTHONPATH": str(SDK), **variables}
    run = subprocess.run(
        [sys.executable, "-c", AS_THE_ENV, str(folder)],
        check=False,
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="takes on other users: needs root, as the docker sandbox's env starts")
def test_the_env_becomes_its_user_and_what_it_runs_and_writes_for_the_agent_is_the_agent_s():
    with tempfile.TemporaryDirectory() as folder:  # pytest's are root's, 0700: no other user may enter
        os.chmod(folder, 0o777)
        seen = as_the_env(
            Path(folder), **{ENV_USER_VARIABLE: f"{ENV_UID}:{GID}", AGENT_USER_VARIABLE: f"{AGENT_UID}:{GID}"}
        )

    assert seen == [
        f"{ENV_UID} {GID} []",
        str(AGENT_UID),
        str(GID),
        str(GID),
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        str(AGENT_UID),
        str(ENV_UID),
    ]


def test_with_no_users_named_the_agent_s_processes_and_files_are_the_env_s(tmp_path):
    seen = as_the_env(tmp_path)

    uid = str(os.getuid())
    assert [seen[1], seen[-2], seen[-1]] == [uid, uid, uid]


def spec(**fields) -> SandboxSpec:
    return SandboxSpec(
        **{
            "env_name": "env",
            "context_dir": Path("/env"),
            "command": ("python3", "-m", "corral.env", "env:Env"),
            "writable": ("/repo",),
            **fields,
        }
    )


def config(spec: SandboxSpec) -> dict:
    return container_config(
        spec, "image", name="name", labels={}, api=docker.APIClient(base_url="unix:///nowhere", version="1.41")
    )


def test_a_corral_env_starts_as_root_with_only_the_capabilities_to_take_on_its_users():
    made = config(spec())

    assert (made["user"], made["host_config"]["CapDrop"], made["host_config"]["CapAdd"]) == (
        "0:0",
        ["ALL"],
        ["SETUID", "SETGID", "KILL"],
    )
    assert (made["environment"][ENV_USER_VARIABLE], made["environment"][AGENT_USER_VARIABLE]) == (ENV_USER, AGENT_USER)
    assert "uid=1001,gid=1000" in made["host_config"]["Tmpfs"]["/repo"]  # the agent's work is the agent's
    assert process_users(spec()) == (AGENT_USER, ENV_USER)


@pytest.mark.parametrize("other", [{"command": ("node", "server.js")}, {"user": "2000:2000"}, {"writable_root": True}])
def test_an_env_with_its_own_command_or_user_or_a_whole_image_runs_as_one_user_with_no_capability(other):
    made = config(spec(**other))

    assert made["user"] != "0:0" and made["host_config"].get("CapAdd") is None
    assert not {ENV_USER_VARIABLE, AGENT_USER_VARIABLE} & set(made["environment"])


def test_the_verifier_s_container_starts_as_the_env_s_user_with_no_capability_and_no_user_to_take_on():
    fresh = fresh_container_config(config(spec()), spec(), {}, lifetime_s=10, emptied={})

    assert (fresh["user"], fresh["host_config"]["CapAdd"]) == (ENV_USER, None)
    assert not {ENV_USER_VARIABLE, AGENT_USER_VARIABLE} & set(fresh["environment"])
    assert "uid=1000,gid=1000" in fresh["host_config"]["Tmpfs"]["/repo"]  # its tar unpacks the agent's files there


def test_the_verifier_s_container_empties_the_image_s_start_up_variables_the_task_did_not_set():
    made = config(spec())
    made["environment"]["NODE_OPTIONS"] = "--require /env/trace.js"  # the task's own: its choice
    image_env = {"BASH_ENV": "/repo/.env", "LD_PRELOAD": "/repo/x.so", "NODE_OPTIONS": "-r x", "LANG": "C.UTF-8"}
    emptied = startup_emptied(image_env, made["environment"])
    fresh = fresh_container_config(made, spec(), {}, lifetime_s=10, emptied=emptied)["environment"]

    assert (fresh["BASH_ENV"], fresh["LD_PRELOAD"]) == ("", "")
    assert fresh["NODE_OPTIONS"] == "--require /env/trace.js" and "LANG" not in fresh
