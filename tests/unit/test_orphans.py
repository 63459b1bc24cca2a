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


# Attacks on the scan: programs named to read as another state and parent in /proc/PID/stat
# (whose name field, in parentheses, may itself hold ") Z <pid>"), left behind as orphans and
# running or exited, beside the env's own children that exit at once.
DISGUISED = textwrap.dedent("""
    import ctypes, os, shutil, sys, tempfile, time
    from corral.env import agent, orphans
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    orphans.EVERY_S = 0.05
    orphans.start_reaper(os.getuid(), agent.started, agent.starting)
    folder = tempfile.mkdtemp()
    for name in (f"a) Z {os.getpid()} (", "b) S 1 1", ") R 0"):
        shutil.copy("/bin/sleep", os.path.join(folder, name))
    kept = [agent.popen(["sh", "-c", "exit 7"]) for _ in range(10)]
    left = agent.popen(["sh", "-c", 'for f in "$0"/*; do "$f" 0.2 & "$f" 30 & done >/dev/null 2>&1; exit 0', folder])
    left.wait()
    time.sleep(1)
    running = set()  # read from /proc/PID/status, whose fields are on lines of their own
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            lines = open(f"/proc/{pid}/status").read().splitlines()
        except OSError:  # another process of this machine, gone meanwhile
            continue
        status = dict(line.split(":", 1) for line in lines if ":" in line)
        if status["PPid"].strip() == str(os.getpid()) and not status["State"].strip().startswith("Z"):
            running.add(int(pid))
    print(orphans._zombie_children(os.getuid()) == {p.pid for p in kept}, {p.wait() for p in kept}, len(running))
    for pid in running:
        os.kill(pid, 9)
    shutil.rmtree(folder)
""")


def test_orphans_named_to_look_like_other_processes_are_reaped_and_the_env_s_children_kept():
    said = subprocess.run([sys.executable, "-c", DISGUISED], check=False, capture_output=True, text=True, timeout=30)

    assert said.stdout.split() == ["True", "{7}", "3"], said.stderr
