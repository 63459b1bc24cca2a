"""The env every provider's contract is checked with: tools that answer, flood, crash and hog."""

import os
import sys
import time

from corral.env import Env, tool


class Contract(Env):
    @tool
    def echo(self, text: str) -> str:
        """Answer with `text`.

        Args:
            text: what to answer.
        """
        return text

    @tool
    def flood(self, megabytes: int) -> str:
        """Answer with `megabytes` MB of text on one line.

        Args:
            megabytes: how much.
        """
        return "x" * (megabytes * 1024 * 1024)

    @tool
    def crash(self) -> str:
        """Say why on stderr, then exit at once with code 3."""
        print("dying on purpose", file=sys.stderr, flush=True)
        os._exit(3)

    @tool
    def hog(self, megabytes: int) -> str:
        """Hold `megabytes` of memory, a little at a time.

        Args:
            megabytes: how much to take.
        """
        held = []
        for _ in range(megabytes):
            held.append(b"\x01" * (1024 * 1024))  # written, so the pages really count
            time.sleep(0.001)
        return f"held {len(held)} MB"
