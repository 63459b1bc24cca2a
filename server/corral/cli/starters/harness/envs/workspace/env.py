"""The workspace the agent works in: the env only reports what the agent left there."""

from pathlib import Path

from corral.env import Env

ANSWER = Path("/tmp/answer.txt")  # /tmp is the sandbox's own, and the agent may write it


class Workspace(Env):
    def reset(self, args: dict) -> None:
        """A fresh sandbox holds no answer yet: nothing to set up."""

    def report(self) -> dict:
        """What the verifier grades once the agent has ended; never shown to the agent."""
        return {"answer": ANSWER.read_text() if ANSWER.exists() else None}
