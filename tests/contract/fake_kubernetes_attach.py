"""A pod's attach stream, as the stand-in API server serves it: a WebSocket in the
`v4.channel.k8s.io` subprotocol (byte 0 of each binary message: 0 stdin, 1 stdout, 2 stderr,
3 the status JSON at the end) joined to the pod's container process."""

from __future__ import annotations

import asyncio
import contextlib
import json

from aiohttp import WSMsgType, web

from tests.contract.fake_kubernetes_objects import Pod, status_reply


async def attach(pod: Pod, request: web.Request) -> web.StreamResponse:
    """Refuse as the API server would (a container not running, stdin already held, the
    subprotocol not offered), else stream the container's stdio until its process ends."""
    process = pod.process
    if process is None or pod.body["status"]["phase"] != "Running" or process.returncode is not None:
        return status_reply(400, "BadRequest", f"container {pod.container['name']} is not running")
    if request.query.get("stdin") == "true" and pod.attached:
        return status_reply(400, "BadRequest", "another attach already holds the container's stdin")
    if "v4.channel.k8s.io" not in request.headers.get("Sec-WebSocket-Protocol", ""):
        return status_reply(400, "BadRequest", "the subprotocol v4.channel.k8s.io was not offered")
    pod.attached = True
    ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",), max_msg_size=0)
    await ws.prepare(request)
    for channel in (1, 2, 3):  # each channel opens with an empty message, as the API server's do
        await ws.send_bytes(bytes([channel]))
    assert process.stdin and process.stdout and process.stderr

    async def pump(stream: asyncio.StreamReader, channel: int) -> None:
        # To its end, even once the client has gone: a process whose pipe is full never ends.
        while chunk := await stream.read(32 * 1024):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.send_bytes(bytes([channel]) + chunk)

    async def outputs() -> None:
        await asyncio.gather(pump(process.stdout, 1), pump(process.stderr, 2))
        await process.wait()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.send_bytes(b"\x03" + json.dumps({"metadata": {}, "status": "Success"}).encode())
        await ws.close()

    sending = asyncio.create_task(outputs())
    async for message in ws:
        if message.type == WSMsgType.BINARY and message.data[:1] == b"\x00":
            with contextlib.suppress(ConnectionError):
                process.stdin.write(message.data[1:])
                await process.stdin.drain()
    process.stdin.close()  # stdinOnce: the attach that held stdin has gone
    await sending
    return ws
