"""corral.env.orphans: the env, as its container's init, reaps the agent's orphaned zombies and
leaves alone the children it started itself, whose exit status its `wait` must still read."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and a subreaper are Linux's")

# A subreaper stands in for PID 1: orphans below it are handed to it, as to a container's init.
SCRIPT = textwrap.dedent("""
    import ctypes, os, time
    from corral.env import agent, orphans
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    orphans.EVERY_S = 0.05
    orphans.start_reaper(os.getuid(), agent.started, agent.starting)
    kept = [agent.popen(["sh", "-c", "exit 7"]) for _ in range(20)]  # exits at once, unwaited
    # Shells that leave a short-lived child behind: each child dies an orphan.
    for _ in range(5):
        agent.popen(["sh", "-c", "sleep 0.2 & exit 0"]).wait()
    time.sleep(1)
    zombies = orphans._zombie_children(os.getuid())
    print(zombies == {process.pid for process in kept}, {process.wait() for process in kept})
""")


def test_the_agent_s_orphans_are_reaped_and_the_env_s_own_children_keep_their_exit_status():
    said = subprocess.run([sys.executable, "-c", SCRIPT], check=False, capture_output=True, text=True, timeout=30)

    assert said.stdout.split() == ["True", "{7}"], said.stderr
