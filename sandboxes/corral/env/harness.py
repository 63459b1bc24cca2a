"""A harness episode's agent, run by corral's runtime inside the sandbox (`corral/run_agent`).

The server asks for it once per episode: the runtime starts the model relay (corral.env.relay)
on the sandbox's loopback, joined to the server's socket in the folder the sandbox was given,
then the agent's command as the agent's user (corral.env.agent) in a session of its own, and
waits for it. At the time limit, or once it has exited, its whole process group is killed, so
nothing it started keeps calling the model or writing files while the verifiers run. Its
output's tail comes back for the episode's record.

Standard library only, as all of corral.env.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile

from corral.env import agent
from corral.env.relay import Relay

OUTPUT_CHARS = 8000  # the tail of the agent's output that comes back


def run_agent(params: dict) -> dict:
    """{"command": [...], "environment": {...}, "socket": path, "port": int, "timeout_s": float}
    -> {"exit_code": int | None (None: killed at the time limit), "timed_out": bool, "output": str}."""
    relay = Relay(params["socket"], params["port"])
    relay.start()
    try:
        with tempfile.TemporaryFile() as output:
            process = agent.popen(
                params["command"],
                env={**os.environ, **params["environment"]},
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: killed whole, whatever it started
            )
            try:
                exit_code: int | None = process.wait(timeout=params["timeout_s"])
            except subprocess.TimeoutExpired:
                exit_code = None
            _kill_group(process.pid)
            process.wait()
            size = output.seek(0, os.SEEK_END)
            output.seek(max(0, size - OUTPUT_CHARS))
            text = output.read().decode("utf-8", errors="replace")
    finally:
        relay.close()
    return {"exit_code": exit_code, "timed_out": exit_code is None, "output": text}


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group has ended already
