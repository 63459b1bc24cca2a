"""One episode's env in a Kubernetes pod, reached over the API server's attach stream.

The pod's one container runs the env's command as its first process, with its stdin open
(`stdinOnce`: it reads end-of-file when the server's attach stream ends). Once the pod runs,
the server attaches over the API server's WebSocket (`v4.channel.k8s.io`: each message's
first byte names its channel, 0 stdin, 1 stdout, 2 stderr, 3 the stream's status), hands the
env corral's SDK over stdin (bootstrap), and speaks the protocol over the same stream. Nothing
reaches the pod over its IP. Closing deletes the pod; a pod that does not start is deleted
before the error that says why. Command verifiers run in a fresh pod of the same image, through
the API server's exec stream (shared.exec_verify, kubernetes.execs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, cast

import aiohttp
from kubernetes_asyncio.client.rest import ApiException

from corral.errors import SandboxError
from corral.sandboxes.base import SandboxSpec
from corral.sandboxes.kubernetes.cluster import Cluster, failure
from corral.sandboxes.kubernetes.pods import CONTAINER, why_not_started
from corral.sandboxes.shared.bootstrap import bootstrapped, sdk_payload
from corral.sandboxes.shared.exec_verify import Execs
from corral.sandboxes.shared.streamed import StreamedSandbox

log = logging.getLogger("corral.sandboxes.kubernetes")

STDIN_CHUNK = 256 * 1024  # one WebSocket message of stdin at most
START_TIMEOUT_S = 300.0  # a pull of a large image on a cold node
POLL_FIRST_S, POLL_MOST_S = 0.02, 0.5
STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3


class KubeSandbox(StreamedSandbox):
    """A running pod whose env talks over `ws`; `on_close` is told when it closes (the
    provider counts live sandboxes and deletes the pod); `execs` runs its verifiers."""

    ended_message = "the pod's attach stream ended"

    def __init__(
        self,
        name: str,
        spec: SandboxSpec,
        ws: aiohttp.ClientWebSocketResponse,
        execs: Execs[str],
        on_close: Callable[[KubeSandbox], None],
    ):
        super().__init__(spec, on_close)
        self.name = name
        self._ws = ws
        self._execs = execs
        self._writing = asyncio.Lock()  # one line's chunks never interleave with another's
        self.readers.append(asyncio.create_task(self._read()))

    @classmethod
    async def create(
        cls,
        cluster: Cluster,
        spec: SandboxSpec,
        manifest: dict[str, Any],
        execs: Execs[str],
        on_close: Callable[[KubeSandbox], None],
    ) -> KubeSandbox:
        """Create the pod, wait until it runs, attach, hand its env the SDK. Raises SandboxError
        saying why a pod did not start, having deleted it."""
        name, namespace = await create_pod(cluster, spec, manifest), cluster.settings.namespace
        try:
            streams = await cluster.streams()
            connecting = await streams.connect_get_namespaced_pod_attach(
                name,
                namespace,
                container=CONTAINER,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
            # Unread (_preload_content=False): aiohttp's WebSocket connect, whatever the type stub says.
            ws = await cast(Any, connecting)
        except BaseException as error:
            await delete_pod(cluster, name)
            if isinstance(error, ApiException):
                raise failure(error, f"attaching to the pod {name} of env {spec.env_name}") from None
            if isinstance(error, aiohttp.ClientError):
                raise SandboxError(f"attaching to the pod {name} of env {spec.env_name} failed: {error}") from None
            raise
        started = cls(name, spec, ws, execs, on_close)
        if bootstrapped(spec.command):
            try:
                await started.write(sdk_payload())
            except BaseException as error:
                await started.close()
                if isinstance(error, EOFError):
                    raise SandboxError(
                        f"the pod {name} of env {spec.env_name} ended before its env started: "
                        f"{started.stderr_tail(1000)}"
                    ) from None
                raise
        return started

    async def write(self, data: bytes) -> None:
        """Write to the env's stdin in chunks; EOFError once the stream has ended."""
        async with self._writing:
            for start in range(0, max(len(data), 1), STDIN_CHUNK):
                if self.ended.is_set() or self._ws.closed:
                    raise EOFError("the pod's attach stream ended")
                try:
                    await self._ws.send_bytes(bytes([STDIN]) + data[start : start + STDIN_CHUNK])
                except (ConnectionError, aiohttp.ClientError) as error:
                    raise EOFError(f"the pod's attach stream ended ({error})") from None

    def verifier_execs(self) -> tuple[Execs[str], str]:
        return self._execs, self.name

    async def stop_stream(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()

    async def _read(self) -> None:
        try:
            async for message in self._ws:
                if message.type != aiohttp.WSMsgType.BINARY or len(message.data) < 2:
                    continue  # the empty message each channel opens with
                channel, data = message.data[0], message.data[1:]
                if channel == STDOUT:
                    await self.output.add_stdout(data)
                elif channel == STDERR:
                    self.output.add_stderr(data)
                elif channel == STATUS and b'"Success"' not in data:
                    self.output.note(f"the attach stream ended: {data.decode('utf-8', 'replace')}")
        except aiohttp.ClientError as error:
            self.output.note(f"reading the pod's attach stream failed: {error}")
        finally:
            self.output.end()


async def create_pod(cluster: Cluster, spec: SandboxSpec, manifest: dict[str, Any]) -> str:
    """Create the pod of `manifest` and wait until it runs: its name. SandboxError saying why
    it did not start, once it has been deleted (also when the wait is cancelled)."""
    name, core = manifest["metadata"]["name"], await cluster.core()
    try:
        await core.create_namespaced_pod(cluster.settings.namespace, cast(Any, manifest))  # the client sends a dict
    except ApiException as error:
        raise failure(error, f"creating the pod of env {spec.env_name}") from None
    try:
        await _until_running(cluster, name, spec)
    except BaseException:
        await delete_pod(cluster, name)
        raise
    return name


async def _until_running(cluster: Cluster, name: str, spec: SandboxSpec) -> None:
    """Wait for the pod to run; SandboxError with the cluster's reason when it will not."""
    core, pause = await cluster.core(), POLL_FIRST_S
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                try:
                    pod = await core.read_namespaced_pod(name, cluster.settings.namespace)
                except ApiException as error:
                    raise failure(error, f"reading the pod {name} of env {spec.env_name}") from None
                if (problem := why_not_started(pod)) is not None:
                    raise SandboxError(f"the pod {name} of env {spec.env_name} did not start: {problem}")
                if pod.status is not None and pod.status.phase == "Running":
                    return
                await asyncio.sleep(pause)
                pause = min(pause * 2, POLL_MOST_S)
    except TimeoutError:
        raise SandboxError(
            f"the pod {name} of env {spec.env_name} did not run within {START_TIMEOUT_S:.0f}s; "
            f"kubectl describe pod {name} says why"
        ) from None


async def delete_pod(cluster: Cluster, name: str) -> None:
    """Delete the pod at once (no grace: its episode is over); a pod already gone is fine."""
    core = await cluster.core()
    try:
        await core.delete_namespaced_pod(name, cluster.settings.namespace, grace_period_seconds=0)
    except ApiException as error:
        if error.status != 404:
            log.warning("deleting the pod %s failed: %s %s", name, error.status, error.reason)
