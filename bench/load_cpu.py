"""Where a load run's CPU goes on this machine, by component, from /proc and cgroup v1 counters.

`sample(server_pid)` reads CPU seconds so far; the difference of two samples, divided by the
episodes played between them, is each component's CPU per episode:

- `server`: the corral server and its live children (verifier workers), and the children it reaped;
- `dockerd`, `containerd`: the engine's daemons (and the children they reaped);
- `containers`: every process in a container (the env, a verifier's tar and tests, execs):
  the `docker` cgroup, which keeps the usage of containers already removed;
- `runtime`: the containerd shims and the runc runs they reap: the live shims' CPU and what
  they reaped, with what PID 1 reaped (exited shims; any other orphan on the machine too),
  less `containers` (a container's processes are reaped by its shim as well);
- `driver`: this bench's own process; `machine`: every core's busy time, all of the above
  and whatever else runs here (`other` is what is left over).
"""

from __future__ import annotations

import os
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
DOCKER_CGROUP = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")
COMPONENTS = ("server", "dockerd", "containerd", "runtime", "containers", "driver", "other")


def _stat(pid: int | str) -> tuple[str, int, float, float]:
    """(name, parent pid, own CPU s, reaped children's CPU s) of a process."""
    text = Path(f"/proc/{pid}/stat").read_text()
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    own = (int(fields[11]) + int(fields[12])) * TICK_S
    reaped = (int(fields[13]) + int(fields[14])) * TICK_S
    return name, int(fields[1]), own, reaped


def _processes() -> dict[int, tuple[str, int, float, float]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = _stat(entry)
            except (OSError, ValueError, IndexError):
                continue  # it ended while listed
    return found


def _descendants(root: int, processes: dict[int, tuple[str, int, float, float]]) -> set[int]:
    tree, grown = {root}, True
    while grown:
        more = {pid for pid, (_, parent, _, _) in processes.items() if parent in tree} - tree
        tree |= more
        grown = bool(more)
    return tree


def sample(server_pid: int) -> dict[str, float]:
    """CPU seconds so far, by component (see the module docstring)."""
    processes = _processes()
    usage = dict.fromkeys(COMPONENTS, 0.0)
    server = _descendants(server_pid, processes)
    for pid, (name, _, own, reaped) in processes.items():
        if pid in server:
            usage["server"] += own + (reaped if pid == server_pid else 0.0)
        elif name in ("dockerd", "containerd"):
            usage[name] += own + reaped
        elif name.startswith("containerd-shim"):
            usage["runtime"] += own + reaped
        elif pid == 1:
            usage["runtime"] += reaped
    usage["containers"] = int(DOCKER_CGROUP.read_text()) / 1e9 if DOCKER_CGROUP.exists() else 0.0
    usage["runtime"] -= usage["containers"]
    times = os.times()
    usage["driver"] = times.user + times.system
    busy = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    # user nice system idle iowait irq softirq steal: all but idle and iowait are busy
    usage["machine"] = sum(int(value) for i, value in enumerate(busy[:8]) if i not in (3, 4)) * TICK_S
    return usage


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds between two samples by component, `other` the machine's rest."""
    used = {key: after[key] - before[key] for key in before}
    used["other"] = used["machine"] - sum(used[key] for key in COMPONENTS if key != "other")
    return used


def per_episode(used: dict[str, float], episodes: int) -> dict[str, float]:
    """Milliseconds of CPU per episode by component."""
    return {key: round(1000 * value / max(episodes, 1), 1) for key, value in used.items()}
