"""The agent's tools in a Harbor task's container: `bash`, `read_file`, `write_file` and
`replace_in_file`, each one command the engine starts in the container (`Sandbox.exec`), as the
image's user in its working folder.

Why from outside: a task's image may have no python3 (nor anything else corral could run an
env process in), and putting corral's code into it would change what the task tests. So the
server runs the tools, and the container needs only what any Harbor task needs: `/bin/sh`
(bash when it has one), and for the file tools `head`, `cat`, `mkdir` and `dirname`.

`bash` runs the command in a shell of its own session (`setsid`, where the image has it) under
a small POSIX-sh wrapper: the session's first process prints its own pid (the session's id)
before it becomes the command's shell, and the wrapper, once that shell exits, its exit status,
each on a line marked with a random nonce. Only a pid line that begins the output counts: the
command can read the nonce, but prints only after that line; the server reads the output until that
line (background processes that still hold the output do not hold the call), keeps its head
and tail with a visible note of what was cut, and at the timeout kills the session (`kill -9
-PGID`, another command of the same user) and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from corral.env.arguments import check_arguments
from corral.env.schema import tool_schema
from corral.sandboxes import Sandbox, SandboxProcess

DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 600  # a build may take minutes; a Harbor bundle's tool deadline is set above it
OUTPUT_HEAD_BYTES = 2_000
OUTPUT_TAIL_BYTES = 6_000
READ_MAX_CHARS = 20_000
REPLACE_MAX_BYTES = 8 * 1024 * 1024  # replace_in_file reads the whole file into the server
FILE_TIMEOUT_S = 20.0  # a file tool on a FIFO or a hung mount gives up then
KILL_GRACE_S = 2.0  # after the kill, how long the wrapper's last line may take

# $0: the nonce, $1: the command. The shell's stdin is /dev/null and its stderr its stdout.
# The session's first process prints its own pid, then becomes the command's shell: that line
# is the output's first, written before the command exists, so nothing the command prints
# (it can read the nonce in /proc) can come before it. Only that line names what is killed.
WRAPPER = r"""
if command -v bash >/dev/null 2>&1; then s=bash; else s=sh; fi
start='printf "\n%s pid %s\n" "$2" "$$"; exec "$0" -c "$1" </dev/null 2>&1'
if command -v setsid >/dev/null 2>&1; then setsid sh -c "$start" "$s" "$1" "$0" </dev/null 2>&1 &
else sh -c "$start" "$s" "$1" "$0" </dev/null 2>&1 &
fi
wait "$!"
printf '\n%s exit %s\n' "$0" "$?"
"""
KILL = 'kill -9 -"$1" 2>/dev/null || kill -9 "$1" 2>/dev/null; exit 0'


class ToolFailed(Exception):
    """A tool call that failed in a way the agent can act on; the message is what it reads."""


class TerminalTools:
    """The tools of one episode's container. Each public coroutine is a tool: its schema comes
    from its type hints and docstring, by corral.env's rules, so it reads as an env's tool."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    async def bash(self, command: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> str:
        """Run a command with bash in the task's container, in its working folder, and see its output and exit status.

        Each call starts a fresh shell: `cd` and variables do not carry over. A process the
        command leaves in the background keeps running, but what it prints after the call
        returns is not shown: send its output to a file. Long output shows its first 2,000 and
        last 6,000 bytes.

        Args:
            command: the command line, e.g. "ls -la && cat README.md".
            timeout_s: seconds before the command and everything it started are stopped (1 to 600, default 30).
        """
        timeout_s = max(1, min(int(timeout_s), MAX_TIMEOUT_S))
        nonce = secrets.token_hex(8)
        process = await self.sandbox.exec(["/bin/sh", "-c", WRAPPER, nonce, command])
        output = _MarkedOutput(nonce)
        timed_out = False
        try:
            async with asyncio.timeout(timeout_s):
                await output.read_until_exit(process)
        except TimeoutError:
            timed_out = True
            if output.pid is not None:
                await self._run(["/bin/sh", "-c", KILL, "sh", str(output.pid)], timeout_s=FILE_TIMEOUT_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_GRACE_S):
                    await output.read_until_exit(process)
        finally:
            await process.close()
        if timed_out:
            status = (
                f"[timed out after {timeout_s}s: the command and everything it started were stopped; run it in "
                f"smaller steps, in the background, or with a larger timeout_s (at most {MAX_TIMEOUT_S})]"
            )
        elif output.exit_status is None:
            status = "[the command's shell ended without an exit status: the container may have stopped]"
        else:
            status = f"[exit status {output.exit_status}]"
        text = output.text().removesuffix("\n")
        return f"{text}\n{status}" if text else status

    async def read_file(self, path: str) -> str:
        """Read a text file in the task's container.

        Args:
            path: the file's path, absolute or relative to the task's working folder.
        """
        code, data = await self._run(
            ["/bin/sh", "-c", 'exec head -c "$1" -- "$2"', "sh", str(READ_MAX_CHARS * 4 + 1), path],
            timeout_s=FILE_TIMEOUT_S,
        )
        if code != 0:
            raise ToolFailed(f"could not read {path}: {data.decode(errors='replace').strip()}")
        text = data.decode(errors="replace")
        if len(text) > READ_MAX_CHARS or len(data) > READ_MAX_CHARS * 4:
            return (
                text[:READ_MAX_CHARS] + f"\n[cut: the file is longer than {READ_MAX_CHARS:,} characters; read the "
                f"rest with bash, e.g. sed -n '400,500p' {path}]"
            )
        return text

    async def write_file(self, path: str, content: str) -> str:
        """Write a text file in the task's container, replacing it if it exists (its folders are made as needed).

        Args:
            path: the file's path, absolute or relative to the task's working folder.
            content: the file's whole new text.
        """
        await self._write(path, content.encode())
        return f"wrote {path} ({len(content)} characters)"

    async def replace_in_file(self, path: str, old: str, new: str) -> str:
        """Replace one exact piece of a file's text with another.

        Args:
            path: the file's path, absolute or relative to the task's working folder.
            old: the text to replace; it must occur exactly once in the file.
            new: the text to put in its place.
        """
        code, data = await self._run(
            ["/bin/sh", "-c", 'exec head -c "$1" -- "$2"', "sh", str(REPLACE_MAX_BYTES + 1), path],
            timeout_s=FILE_TIMEOUT_S,
        )
        if code != 0:
            raise ToolFailed(f"could not read {path}: {data.decode(errors='replace').strip()}")
        if len(data) > REPLACE_MAX_BYTES:
            raise ToolFailed(f"{path} is larger than {REPLACE_MAX_BYTES >> 20} MB; edit it with bash (e.g. sed -i)")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise ToolFailed(f"{path} is not UTF-8 text; edit it with bash") from None
        count = text.count(old) if old else 0
        if count != 1:
            found = "does not occur" if count == 0 else f"occurs {count} times"
            raise ToolFailed(f"the old text {found} in {path}; give a piece that occurs exactly once")
        await self._write(path, text.replace(old, new).encode())
        return f"replaced 1 occurrence in {path}"

    async def _write(self, path: str, data: bytes) -> None:
        code, said = await self._run(
            ["/bin/sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "sh", path],
            stdin=data,
            timeout_s=FILE_TIMEOUT_S,
        )
        if code != 0:
            raise ToolFailed(f"could not write {path}: {said.decode(errors='replace').strip()}")

    async def _run(
        self, command: list[str], *, timeout_s: float, stdin: bytes | None = None
    ) -> tuple[int | None, bytes]:
        """A short command's exit code and output (stdout and stderr together)."""
        process = await self.sandbox.exec(command, stdin=stdin is not None)
        output = bytearray()
        try:
            async with asyncio.timeout(timeout_s):
                if stdin is not None:
                    await process.write(stdin)
                    await process.close_stdin()
                while chunk := await process.read():
                    output += chunk
                return await process.exit_code(), bytes(output)
        except TimeoutError:
            raise ToolFailed(
                f"{command[0]} did not finish within {timeout_s:g}s (is the path a FIFO or a device?)"
            ) from None
        finally:
            await process.close()


TOOLS: dict[str, dict[str, Any]] = {
    name: tool_schema(getattr(TerminalTools, name)) for name in ("bash", "read_file", "write_file", "replace_in_file")
}


async def call(tools: TerminalTools, name: str, arguments: dict[str, Any]) -> tuple[str, str | None]:
    """Run the tool `name`: (its answer, None), or (why it failed, the kind of failure, as
    corral's runtime names it: tool_not_found, invalid_args, execution_error)."""
    if name not in TOOLS:
        return f"unknown tool '{name}'; the tools are: {', '.join(TOOLS)}", "tool_not_found"
    problems = check_arguments(TOOLS[name], arguments)
    if problems:
        return problems, "invalid_args"
    method: Callable[..., Awaitable[str]] = getattr(tools, name)
    try:
        return await method(**arguments), None
    except ToolFailed as failed:
        return str(failed), "execution_error"


class _MarkedOutput:
    """A bash call's output, read up to the wrapper's exit line: the nonce's lines taken out,
    the rest kept as its head and tail."""

    def __init__(self, nonce: str):
        self._marker = re.compile(rb"\n" + nonce.encode() + rb" (pid|exit) (\d+)\n")
        self._pending = bytearray()  # may end with the start of a marker line
        self._longest = len(nonce) + 32
        self.pid: int | None = None
        self.exit_status: int | None = None
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0

    async def read_until_exit(self, process: SandboxProcess) -> None:
        while self.exit_status is None and (chunk := await process.read()):
            self._feed(chunk)
        if self.exit_status is None:  # the stream ended first: keep what was held back
            self._keep(bytes(self._pending))
            self._pending.clear()

    def _feed(self, chunk: bytes) -> None:
        self._pending += chunk
        while (found := self._marker.search(self._pending)) is not None:
            kind, number = bytes(found.group(1)), int(found.group(2))  # before the buffer changes under them
            line = bytes(found.group(0))
            self._keep(bytes(self._pending[: found.start()]))
            del self._pending[: found.end()]
            if kind == b"pid" and self._total == 0 and self.pid is None:
                self.pid = number
            elif kind == b"pid":  # only the output's first line is the wrapper's: this is the command's
                self._keep(line)
            else:
                self.exit_status = number
                return  # what comes after is a background process's, printed after the call returned
        start = self._pending.rfind(b"\n", max(0, len(self._pending) - self._longest))
        safe = len(self._pending) if start < 0 else start
        self._keep(bytes(self._pending[:safe]))
        del self._pending[:safe]

    def _keep(self, data: bytes) -> None:
        self._total += len(data)
        room = max(OUTPUT_HEAD_BYTES - len(self._head), 0)
        self._head += data[:room]
        self._tail += data[room:]
        del self._tail[:-OUTPUT_TAIL_BYTES]

    def text(self) -> str:
        """The output, with a note in the middle when it was cut."""
        head, tail = self._head.decode(errors="replace"), self._tail.decode(errors="replace")
        cut = self._total - len(self._head) - len(self._tail)
        if cut > 0:
            return (
                f"{head}\n[output cut: {cut:,} bytes of {self._total:,} left out; showing the first "
                f"{OUTPUT_HEAD_BYTES:,} and the last {OUTPUT_TAIL_BYTES:,}]\n{tail}"
            )
        return head + tail
