"""Commands in a pod over the API server's exec stream, and the fresh pods command verifiers
run in (shared.exec_verify's steps, on Kubernetes).

Exec is a WebSocket in the `v4.channel.k8s.io` subprotocol, as attach is (kubernetes.sandbox): each
message's first byte names its channel, 0 stdin, 1 stdout, 2 stderr, 3 the command's end, a
Status object: `{"status": "Success"}`, or `{"status": "Failure", "reason": "NonZeroExitCode",
"details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}` (client-go's errorDecoderV4
reads it so); any other failure (a command not found) is the platform's, a SandboxError. The
command runs as the container's user (runAsUser), in its working folder, with its variables.

v4 cannot end a command's stdin without ending the stream, and with it the status (v5's CLOSE
signal came with Kubernetes 1.30 and is not in the client): a command given stdin reads
exactly its size, through the image's `head -c`.

A verifier's pod is the agent's pod with an idle command (kubernetes.pods), labelled like it with
`corral.purpose=verify` and `corral.network=none` under the run's NetworkPolicy, and deleted
with no grace when the verification ends, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import aiohttp
from kubernetes_asyncio.client.rest import ApiException

from corral.errors import SandboxError
from corral.sandboxes.base import SandboxSpec
from corral.sandboxes.kubernetes.cluster import Cluster, failure
from corral.sandboxes.kubernetes.network import NETWORK_LABEL
from corral.sandboxes.kubernetes.pods import CONTAINER, pod_manifest, pod_name
from corral.sandboxes.kubernetes.sandbox import STDIN_CHUNK, create_pod, delete_pod
from corral.sandboxes.shared.exec_verify import SH, SLEEP, STDERR, STDOUT, Execs, Output, Stdin

HEAD = "/usr/bin/head"
STDIN, STATUS = 0, 3


class KubeExecs(Execs[str]):
    """Fresh pods of `spec` from `image`, labelled `labels`; `isolate` makes the run's
    NetworkPolicy before the first (kubernetes.network). A sandbox is a pod's name."""

    where = "on Kubernetes"
    errors = (ApiException, aiohttp.ClientError)

    def __init__(
        self,
        cluster: Cluster,
        spec: SandboxSpec,
        image: str,
        labels: Mapping[str, str],
        isolate: Callable[[], Awaitable[None]],
    ):
        self.cluster = cluster
        self.spec = spec
        self.image = image
        self.labels = {**labels, "corral.purpose": "verify", NETWORK_LABEL: "none"}
        self.isolate = isolate

    async def start(self, files_dir: str, lifetime_s: int) -> str:
        await self.isolate()
        manifest = pod_manifest(
            self.spec,
            self.image,
            name=pod_name(self.spec.env_name),
            labels=self.labels,
            runtime_class=self.cluster.settings.runtime_class,
            idle=[SLEEP, str(lifetime_s)],
            files_dir=files_dir,
        )
        return await create_pod(self.cluster, self.spec, manifest)

    async def run(self, sandbox: str, argv: Sequence[str], output: Output, stdin: Stdin | None = None) -> int:
        return await run_in_pod(self.cluster, sandbox, argv, output, stdin)

    async def remove(self, sandbox: str) -> None:
        await delete_pod(self.cluster, sandbox)


async def run_in_pod(cluster: Cluster, pod: str, argv: Sequence[str], output: Output, stdin: Stdin | None) -> int:
    """Run `argv` in `pod` over an exec stream (see the module docstring): its exit code."""
    if stdin is not None:
        argv = [SH, "-c", f'{HEAD} -c "$0" | "$@"', str(stdin.size), *argv]
    streams = await cluster.streams()
    try:
        connecting = await streams.connect_get_namespaced_pod_exec(
            pod,
            cluster.settings.namespace,
            command=cast(Any, list(argv)),  # the WebSocket client sends a list as one `command` per item
            container=CONTAINER,
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )
        # Unread (_preload_content=False): aiohttp's WebSocket connect, whatever the type stub says.
        ws: aiohttp.ClientWebSocketResponse = await cast(Any, connecting)
    except ApiException as error:
        raise failure(error, f"running {argv[0]} in the pod {pod}") from None
    writer = asyncio.create_task(_send(ws, stdin)) if stdin is not None else None
    status = b""
    try:
        async for message in ws:
            if message.type != aiohttp.WSMsgType.BINARY or len(message.data) < 2:
                continue  # the empty message each channel opens with
            channel, data = message.data[0], message.data[1:]
            if channel in (STDOUT, STDERR):
                output(channel, data)
            elif channel == STATUS:
                status += data
    finally:
        if writer is not None:
            writer.cancel()
        await ws.close()
    return exit_code(status, f"{argv[0]} in the pod {pod}")


async def _send(ws: aiohttp.ClientWebSocketResponse, stdin: Stdin) -> None:
    with contextlib.suppress(ConnectionError, aiohttp.ClientError):  # the command ended before reading it all
        while chunk := stdin.file.read(STDIN_CHUNK):
            await ws.send_bytes(bytes([STDIN]) + chunk)


def exit_code(status: bytes, what: str) -> int:
    """The exit code a v4 exec stream's status gives; SandboxError when it gives none."""
    try:
        body = json.loads(status)
    except ValueError:
        raise SandboxError(f"the exec stream of {what} ended without saying how the command ended") from None
    if body.get("status") == "Success":
        return 0
    if body.get("reason") == "NonZeroExitCode":
        for cause in (body.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                return int(cause["message"])
    raise SandboxError(f"running {what} failed: {body.get('message') or body}")
