"""ShellFix: a small Python repository with a bug, a shell and file tools to fix it.

`reset` writes the task's repository into the working directory; `bash` runs a command
there, and `read_file`, `write_file` and `replace_in_file` edit files in it. The env keeps no
score: the bundle's command verifier runs the task's hidden tests in this sandbox after the
agent's last turn. The commands and the files are the agent's (`corral.env.agent`): where the
sandbox gives the agent a user of its own, they run and are written as that user.
"""

import os
import signal
import subprocess
import threading
from pathlib import Path

from corral.env import Env, agent, tool

DEFAULT_TIMEOUT_S = 10
MAX_TIMEOUT_S = 30  # below the server's default tool deadline (60 s), so a call answers
OUTPUT_HEAD_CHARS = 2_000
OUTPUT_TAIL_CHARS = 6_000
READ_MAX_CHARS = 20_000


class ShellFix(Env):
    """One repository. Task args: `files`, the repository as {relative path: text}."""

    def reset(self, args: dict) -> None:
        self.resume(args)
        with agent.files():
            for relative, text in args["files"].items():
                path = self._path(relative)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)

    def resume(self, args: dict) -> None:
        """A fork's copy: the repository's files are the episode's, copied in after this."""
        self.root = Path.cwd()
        # The agent's commands see the repository, not the env's own code on PYTHONPATH.
        self.environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}

    @tool
    def bash(self, command: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> str:
        """Run a bash command in the repository's folder and see its output and exit status.

        Each call starts a fresh shell there: `cd` and variables do not carry over, and
        whatever the command leaves running in the background is stopped when it returns.

        Args:
            command: the command line, e.g. "python3 -c 'import stats; print(stats.median([1, 2]))'".
            timeout_s: seconds before the command and everything it started are stopped
                (1 to 30, default 10).
        """
        timeout_s = max(1, min(timeout_s, MAX_TIMEOUT_S))
        process = agent.popen(
            ["bash", "-c", command],
            cwd=self.root,
            env=self.environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        output = _CappedOutput(process.stdout)
        try:
            status = f"[exit status {process.wait(timeout=timeout_s)}]"
        except subprocess.TimeoutExpired:
            status = (
                f"[timed out after {timeout_s}s: the command and everything it started were "
                f"stopped; run it in smaller steps or pass a larger timeout_s (at most "
                f"{MAX_TIMEOUT_S})]"
            )
        # Its own process group: this stops background children too, which also ends the pipe.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        text = output.text().removesuffix("\n")
        return f"{text}\n{status}" if text else status

    @tool
    def read_file(self, path: str) -> str:
        """Read a text file of the repository.

        Args:
            path: the file's path, relative to the repository's folder.
        """
        with agent.files():
            text = self._path(path).read_text(errors="replace")
        if len(text) > READ_MAX_CHARS:
            return (
                text[:READ_MAX_CHARS] + f"\n[cut: the file has {len(text)} characters; "
                f"read the rest with bash, e.g. sed -n '400,500p' {path}]"
            )
        return text

    @tool
    def write_file(self, path: str, content: str) -> str:
        """Write a text file of the repository, replacing it if it exists.

        Args:
            path: the file's path, relative to the repository's folder.
            content: the file's whole new text.
        """
        target = self._path(path)
        with agent.files():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        return f"wrote {path} ({len(content)} characters)"

    @tool
    def replace_in_file(self, path: str, old: str, new: str) -> str:
        """Replace one exact piece of a file's text with another.

        Args:
            path: the file's path, relative to the repository's folder.
            old: the text to replace; it must occur exactly once in the file.
            new: the text to put in its place.
        """
        target = self._path(path)
        with agent.files():
            text = target.read_text()
            count = text.count(old) if old else 0
            if count != 1:
                found = "does not occur" if count == 0 else f"occurs {count} times"
                raise ValueError(f"the old text {found} in {path}; give a piece that occurs exactly once")
            target.write_text(text.replace(old, new))
        return f"replaced 1 occurrence in {path}"

    def _path(self, relative: str) -> Path:
        """A path inside the repository; a path that leaves it is refused."""
        path = (self.root / relative).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"{relative} is outside the repository; give a path inside it")
        return path


class _CappedOutput:
    """Reads a pipe to its end in a thread, keeping only its head and tail in memory."""

    def __init__(self, pipe):
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe) -> None:
        with pipe:
            while chunk := pipe.read1(65536):
                self._total += len(chunk)
                room = OUTPUT_HEAD_CHARS - len(self._head)
                self._head += chunk[: max(room, 0)]
                self._tail += chunk[max(room, 0) :]
                del self._tail[:-OUTPUT_TAIL_CHARS]

    def text(self) -> str:
        """The output, with a note in the middle when it was cut."""
        # A process that left the command's process group (setsid) may hold the pipe open.
        self._thread.join(timeout=2)
        head = self._head.decode(errors="replace")
        tail = self._tail.decode(errors="replace")
        cut = self._total - len(self._head) - len(self._tail)
        if cut > 0:
            return (
                f"{head}\n[output cut: {cut} bytes of {self._total} left out; showing the "
                f"first {OUTPUT_HEAD_CHARS} and the last {OUTPUT_TAIL_CHARS}]\n{tail}"
            )
        return head + tail
