"""A stand-in for a Kubernetes API server: what the kubernetes provider calls, on the real wire.

It speaks HTTP and JSON as kube-apiserver does, to the official client (kubernetes_asyncio)
pointed at it by a kubeconfig: pods (create, get, list by label selector, delete), their
status as a kubelet reports it (Pending, then Running, then Succeeded or Failed with the
container's exit code; ErrImagePull/ImagePullBackOff for an image the registry lacks;
Unschedulable for a pod larger than the node), coordination.k8s.io Leases (create, get,
replace with resourceVersion checks, merge patch, delete), networking.k8s.io NetworkPolicies
(create, get, list by label selector, delete: stored, not enforced), and a pod's attach stream over a
WebSocket in the `v4.channel.k8s.io` subprotocol (byte 0 of each binary message: 0 stdin,
1 stdout, 2 stderr, 3 the status JSON at the end), and an exec in it over the same subprotocol,
whose status carries the command's exit code as the kubelet's does.

Each pod's container is a real local process in namespaces of its own (fake_kubernetes_node,
which says what it does not emulate): the image names a local folder (`images`), which is its
working folder, and the container's `args` (its `command`, if any, before them) run there with
the pod's variables, as its `runAsUser`, on a read-only root with a folder of its own for each
emptyDir. Validation follows the API server's where the provider
could get it wrong: names and label values, a bearer token, and 404/409 as Status objects.
Routes it does not know answer 404 and are recorded in `unknown`: a test fails on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.contract.fake_kubernetes_attach import attach, exec_in
from tests.contract.fake_kubernetes_node import NoBwrap, remove_volumes, start_container
from tests.contract.fake_kubernetes_objects import (
    Pod,
    has_labels,
    invalid_pod,
    invalid_policy,
    label_selector,
    status_reply,
    timestamp,
)

TOKEN = "fake-token"
NODE_MEMORY_MI = 64 * 1024
PODS = "/api/v1/namespaces/{namespace}/pods"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
POLICIES = "/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"


class FakeCluster:
    """The API server and its one node; `start()` serves it on a thread of its own."""

    def __init__(self, images: dict[str, Path]):
        self.images = images  # image reference -> the local folder its container runs in
        self.pods: dict[tuple[str, str], Pod] = {}
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.unknown: list[str] = []
        self.created = 0  # pods created, ever
        self.volumes = Path(tempfile.mkdtemp(prefix="fake-kubernetes-"))  # each pod's emptyDirs, in a folder of its own
        self._version = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- running it -------------------------------------------------------------------------
    def start(self) -> str:
        self._thread.start()
        self.url = self.call(self._serve())
        return self.url

    def call(self, work):
        """Run a coroutine on the server's loop from any thread, and return its result."""
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=60)

    def kubeconfig(self, namespace: str) -> str:
        return json.dumps(
            {  # JSON is YAML: the client reads it as its kubeconfig
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {"token": TOKEN}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            }
        )

    def stop(self) -> None:
        self.call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        remove_volumes(self.volumes)

    async def _serve(self) -> str:
        app = web.Application(middlewares=[self._auth], client_max_size=64 * 2**20)
        app.router.add_route("*", PODS, self._pods)
        app.router.add_route("*", PODS + "/{name}", self._pod)
        app.router.add_get(PODS + "/{name}/attach", self._attach)
        app.router.add_get(PODS + "/{name}/exec", self._exec)
        app.router.add_route("*", LEASES, self._lease_collection)
        app.router.add_route("*", LEASES + "/{name}", self._lease)
        app.router.add_route("*", POLICIES, self._policy_collection)
        app.router.add_route("*", POLICIES + "/{name}", self._policy)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    async def _shutdown(self) -> None:
        for pod in list(self.pods.values()):
            await self._kill(pod)
        self.pods.clear()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return status_reply(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    async def _unknown(self, request: web.Request) -> web.Response:
        self.unknown.append(f"{request.method} {request.path_qs}")
        return status_reply(404, "NotFound", f"the server could not find the requested resource ({request.path})")

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    # -- pods -------------------------------------------------------------------------------
    async def _pods(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        if request.method == "GET":
            wanted = label_selector(request)
            items = [pod.body for (ns, _), pod in self.pods.items() if ns == namespace and has_labels(pod.body, wanted)]
            if "limit" in request.query:
                items = items[: int(request.query["limit"])]
            return web.json_response(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self._version)},
                    "items": items,
                }
            )
        if request.method != "POST":
            return await self._unknown(request)
        body = await request.json()
        name = body.get("metadata", {}).get("name", "")
        if problem := invalid_pod(body):
            return status_reply(422, "Invalid", f'Pod "{name}" is invalid: {problem}')
        if (namespace, name) in self.pods:
            return status_reply(409, "AlreadyExists", f'pods "{name}" already exists')
        body["metadata"].update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_version(),
            creationTimestamp=timestamp(),
        )
        pod = Pod(body)
        pod.set_state("Pending", {"waiting": {"reason": "ContainerCreating"}})
        self.pods[(namespace, name)] = pod
        self.created += 1
        pod.runner = asyncio.create_task(self._kubelet(pod))
        return web.json_response(body, status=201)

    async def _pod(self, request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        pod = self.pods.get(key)
        if pod is None:
            return status_reply(404, "NotFound", f'pods "{key[1]}" not found')
        if request.method == "GET":
            return web.json_response(pod.body)
        if request.method == "DELETE":
            del self.pods[key]
            await self._kill(pod)
            return web.json_response(pod.body)
        return await self._unknown(request)

    async def _kubelet(self, pod: Pod) -> None:
        """Schedule the pod, pull its image, run its container, report how it ended."""
        container = pod.container
        memory = container.get("resources", {}).get("requests", {}).get("memory", "0Mi")
        if int(memory.removesuffix("Mi")) > NODE_MEMORY_MI:
            pod.set_state(
                "Pending",
                {"waiting": {"reason": "ContainerCreating"}},
                [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: "
                        "1 No preemption victims found for incoming pod.",
                    }
                ],
            )
            return
        folder = self.images.get(container["image"])
        if folder is None:
            pod.set_state(
                "Pending",
                {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": f'rpc error: failed to pull and unpack image "{container["image"]}": not found',
                    }
                },
            )
            await asyncio.sleep(0.2)
            pod.set_state(
                "Pending",
                {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": f'Back-off pulling image "{container["image"]}"',
                    }
                },
            )
            return
        try:
            await start_container(pod, folder, self._pod_volumes(pod))
        except NoBwrap as error:  # as a kubelet reports a container it cannot create
            pod.set_state("Pending", {"waiting": {"reason": "CreateContainerError", "message": str(error)}})
            return
        assert pod.process is not None
        if pod.deleted:  # deleted while its container started
            os.killpg(pod.process.pid, signal.SIGKILL)
        pod.set_state("Running", {"running": {"startedAt": timestamp()}})
        code = await pod.process.wait()
        pod.set_state(
            "Succeeded" if code == 0 else "Failed",
            {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": timestamp(),
                    "finishedAt": timestamp(),
                }
            },
        )

    async def _kill(self, pod: Pod) -> None:
        """The container's processes killed (deletion with no grace), its kubelet's work ended."""
        pod.deleted = True
        if pod.process is not None and pod.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod.process.pid, signal.SIGKILL)
        if pod.process is not None and not pod.attached:  # asyncio's wait() waits for its pipes' ends too
            await asyncio.gather(pod.process.stdout.read(), pod.process.stderr.read())  # type: ignore[union-attr]
        if pod.runner is not None:
            await pod.runner
        remove_volumes(self._pod_volumes(pod))

    def _pod_volumes(self, pod: Pod) -> Path:
        return self.volumes / pod.body["metadata"]["namespace"] / pod.body["metadata"]["name"]

    async def _attach(self, request: web.Request) -> web.StreamResponse:
        key = (request.match_info["namespace"], request.match_info["name"])
        pod = self.pods.get(key)
        if pod is None:
            return status_reply(404, "NotFound", f'pods "{key[1]}" not found')
        return await attach(pod, request)

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        key = (request.match_info["namespace"], request.match_info["name"])
        pod = self.pods.get(key)
        if pod is None:
            return status_reply(404, "NotFound", f'pods "{key[1]}" not found')
        return await exec_in(pod, request)

    # -- leases -----------------------------------------------------------------------------
    async def _lease_collection(self, request: web.Request) -> web.Response:
        if request.method != "POST":
            return await self._unknown(request)
        body = await request.json()
        key = (request.match_info["namespace"], body["metadata"]["name"])
        if key in self.leases:
            return status_reply(409, "AlreadyExists", f'leases.coordination.k8s.io "{key[1]}" already exists')
        body.update(apiVersion="coordination.k8s.io/v1", kind="Lease")
        body["metadata"].update(namespace=key[0], resourceVersion=self._next_version())
        self.leases[key] = body
        return web.json_response(body, status=201)

    async def _lease(self, request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        held = self.leases.get(key)
        if held is None:
            return status_reply(404, "NotFound", f'leases.coordination.k8s.io "{key[1]}" not found')
        if request.method == "GET":
            return web.json_response(held)
        if request.method == "DELETE":
            del self.leases[key]
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        body = await request.json()
        if request.method == "PUT":
            if body["metadata"].get("resourceVersion") != held["metadata"]["resourceVersion"]:
                return status_reply(
                    409,
                    "Conflict",
                    f"Operation cannot be fulfilled on leases.coordination.k8s.io "
                    f'"{key[1]}": the object has been modified',
                )
            held = {**body, "apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
        elif request.method == "PATCH" and request.content_type == "application/merge-patch+json":
            held["spec"].update(body.get("spec", {}))
        else:
            return await self._unknown(request)
        held["metadata"].update(namespace=key[0], resourceVersion=self._next_version())
        self.leases[key] = held
        return web.json_response(held)

    def age_lease(self, namespace: str, name: str, seconds: float) -> None:
        """Make a lease look last renewed `seconds` ago (what a killed server's becomes)."""
        moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
        self.leases[(namespace, name)]["spec"]["renewTime"] = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    # -- network policies -------------------------------------------------------------------
    async def _policy_collection(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        if request.method == "GET":
            wanted = label_selector(request)
            items = [body for (ns, _), body in self.policies.items() if ns == namespace and has_labels(body, wanted)]
            return web.json_response(
                {
                    "kind": "NetworkPolicyList",
                    "apiVersion": "networking.k8s.io/v1",
                    "metadata": {"resourceVersion": str(self._version)},
                    "items": items,
                }
            )
        if request.method != "POST":
            return await self._unknown(request)
        body = await request.json()
        key = (namespace, body.get("metadata", {}).get("name", ""))
        if problem := invalid_policy(body):
            return status_reply(422, "Invalid", f'NetworkPolicy.networking.k8s.io "{key[1]}" is invalid: {problem}')
        if key in self.policies:
            return status_reply(409, "AlreadyExists", f'networkpolicies.networking.k8s.io "{key[1]}" already exists')
        body["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=self._next_version())
        self.policies[key] = body
        return web.json_response(body, status=201)

    async def _policy(self, request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        if key not in self.policies:
            return status_reply(404, "NotFound", f'networkpolicies.networking.k8s.io "{key[1]}" not found')
        if request.method == "GET":
            return web.json_response(self.policies[key])
        if request.method == "DELETE":
            del self.policies[key]
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return await self._unknown(request)

    def policies_of(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        """The NetworkPolicies whose podSelector selects the pod (what a CNI would apply to it)."""
        labels = self.pods[(namespace, pod)].body["metadata"].get("labels", {})
        return [
            body
            for (ns, _), body in self.policies.items()
            if ns == namespace
            and all(labels.get(k) == v for k, v in body["spec"]["podSelector"].get("matchLabels", {}).items())
        ]

    def labelled(self, namespace: str, **labels: str) -> list[str]:
        """The pods in `namespace` with all of `labels` (label keys with dots passed as a dict)."""
        return [name for (ns, name), pod in list(self.pods.items()) if ns == namespace and has_labels(pod.body, labels)]
