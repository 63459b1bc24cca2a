"""A pod's attach and exec streams, as the stand-in API server serves them: a WebSocket in the
`v4.channel.k8s.io` subprotocol (byte 0 of each binary message: 0 stdin, 1 stdout, 2 stderr,
3 the status JSON at the end) joined to the container's process, or to a command run in the
pod's namespaces (fake_kubernetes_node). An exec's status is the kubelet's: Success, or a
Failure whose reason is NonZeroExitCode and whose cause carries the exit code."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import WSMsgType, web

from tests.contract.fake_kubernetes_node import exec_command
from tests.contract.fake_kubernetes_objects import Pod, status_reply

SUBPROTOCOL = "v4.channel.k8s.io"
TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # what Go's strconv.ParseBool reads as true (the client sends True)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "") in TRUE


def _refusal(pod: Pod, request: web.Request) -> web.Response | None:
    """What the API server answers instead of a stream, if anything."""
    process = pod.process
    if process is None or pod.body["status"]["phase"] != "Running" or process.returncode is not None:
        return status_reply(400, "BadRequest", f"container {pod.container['name']} is not running")
    if SUBPROTOCOL not in request.headers.get("Sec-WebSocket-Protocol", ""):
        return status_reply(400, "BadRequest", f"the subprotocol {SUBPROTOCOL} was not offered")
    return None


async def attach(pod: Pod, request: web.Request) -> web.StreamResponse:
    """Refuse as the API server would (a container not running, stdin already held, the
    subprotocol not offered), else stream the container's stdio until its process ends."""
    if (refused := _refusal(pod, request)) is not None:
        return refused
    if _flag(request, "stdin") and pod.attached:
        return status_reply(400, "BadRequest", "another attach already holds the container's stdin")
    pod.attached = True
    assert pod.process is not None
    return await _stream(pod.process, request, lambda code: {"metadata": {}, "status": "Success"})


async def exec_in(pod: Pod, request: web.Request) -> web.StreamResponse:
    """Run the query's `command` in the pod, its stdin open if `stdin=true`, and stream it."""
    if (refused := _refusal(pod, request)) is not None:
        return refused
    argv = request.query.getall("command", [])
    process = await asyncio.create_subprocess_exec(
        *exec_command(pod, argv),
        env=pod.variables,
        stdin=asyncio.subprocess.PIPE if _flag(request, "stdin") else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )

    def status(code: int) -> dict[str, Any]:
        if code == 0:
            return {"metadata": {}, "status": "Success"}
        return {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command {argv}, exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }

    return await _stream(process, request, status)


async def _stream(process: asyncio.subprocess.Process, request: web.Request, status) -> web.StreamResponse:
    ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), max_msg_size=0)
    await ws.prepare(request)
    for channel in (1, 2, 3):  # each channel opens with an empty message, as the API server's do
        await ws.send_bytes(bytes([channel]))
    assert process.stdout and process.stderr

    async def pump(stream: asyncio.StreamReader, channel: int) -> None:
        # To its end, even once the client has gone: a process whose pipe is full never ends.
        while chunk := await stream.read(32 * 1024):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.send_bytes(bytes([channel]) + chunk)

    async def outputs() -> None:
        await asyncio.gather(pump(process.stdout, 1), pump(process.stderr, 2))
        code = await process.wait()
        code = 128 - code if code < 0 else code  # killed by a signal: as a runtime reports it
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.send_bytes(b"\x03" + json.dumps(status(code)).encode())
        await ws.close()

    sending = asyncio.create_task(outputs())
    async for message in ws:
        if message.type == WSMsgType.BINARY and message.data[:1] == b"\x00" and process.stdin is not None:
            with contextlib.suppress(ConnectionError):
                process.stdin.write(message.data[1:])
                await process.stdin.drain()
    if process.stdin is not None:
        process.stdin.close()  # the stream that held stdin has gone (attach: stdinOnce)
    await sending
    return ws
