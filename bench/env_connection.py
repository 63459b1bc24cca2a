"""What the in-process env connection saves per tool call, beside the path it replaced.

    python bench/env_connection.py                 # ~3 s on 2 cores
    python bench/env_connection.py --calls 20000 --output-bytes 8000

A Harbor task's tools are answered in the server. Before, the episode spoke to them as to any
env process: `EnvProcess` encoded each call as a JSON-RPC line, and a sandbox in the same
process (`HostedSandbox`, removed) parsed it, ran the tool, encoded the reply, which
`EnvProcess` parsed again. Now the episode calls `InProcessConnection.call_tool`. Both paths run
here, side by side in one process, on the same tools, whose answer is ready at once (a real
`bash` call adds a docker exec: milliseconds), so the figures are the connection's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from corral.env import jsonrpc
from corral.sandboxes import CommandResult, Sandbox
from corral.server.connection.base import EnvConnection
from corral.server.connection.inprocess import InProcessConnection
from corral.server.connection.stdio import EnvProcess

ARGUMENTS = {"command": "cat /app/report.txt | head -n 40", "timeout_s": 30}


class Instant:
    """Served tools whose answer (`size` characters) is ready at once."""

    def __init__(self, size: int):
        self.text = ("a line of a tool's output\n" * (size // 26 + 1))[:size]

    def schemas(self) -> list[dict[str, Any]]:
        return []

    async def run(self, name: str, arguments: dict[str, Any]) -> tuple[str, str | None]:
        return self.text, None


class EncodedSandbox(Sandbox):
    """The path replaced: a sandbox in the server that parses each JSON-RPC line, runs the tool,
    and encodes its reply for `EnvProcess` to parse (as `harbor.hosted.HostedSandbox` did)."""

    def __init__(self, tools: Instant):
        self.tools = tools
        self._replies: asyncio.Queue[bytes] = asyncio.Queue()

    async def send_line(self, line: bytes) -> None:
        message = jsonrpc.decode(line)
        if "id" not in message:
            return
        params = message.get("params") or {}
        text, failure = await self.tools.run(params["name"], params.get("arguments") or {})
        result = {"content": [{"type": "text", "text": text}], "isError": failure is not None}
        self._replies.put_nowait(jsonrpc.encode(jsonrpc.result(message["id"], result)))

    async def read_line(self) -> bytes:
        return await self._replies.get()

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return ""

    async def verify(
        self,
        files: Mapping[str, bytes],
        command: Callable[[str], Sequence[str]],
        *,
        timeout_s: float,
        max_output_chars: int = 20_000,
    ) -> CommandResult:
        raise NotImplementedError

    async def close(self) -> None:
        pass


async def per_call_us(connection: EnvConnection, calls: int) -> float:
    """Microseconds per tool call, over `calls` calls."""
    started = time.perf_counter()
    for _ in range(calls):
        await connection.call_tool("bash", ARGUMENTS)
    return (time.perf_counter() - started) / calls * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of each path; the median is shown")
    parser.add_argument("--output-bytes", type=int, nargs="+", default=[200, 8000])
    args = parser.parse_args()
    print(f"{'tool output':>12}  {'encode-then-parse':>18}  {'in-process':>11}  {'saved':>9}")
    for size in args.output_bytes:
        tools = Instant(size)
        encoded, direct = [], []
        for _ in range(args.rounds):  # alternated, so both paths meet the same machine
            encoded.append(await per_call_us(EnvProcess(EncodedSandbox(tools)), args.calls))
            direct.append(await per_call_us(InProcessConnection(EncodedSandbox(tools), tools), args.calls))
        old, new = statistics.median(encoded), statistics.median(direct)
        print(f"{size:>10} B  {old:>15.1f} µs  {new:>8.1f} µs  {old - new:>6.1f} µs  ({old / new:.1f}x)")


if __name__ == "__main__":
    asyncio.run(main())
