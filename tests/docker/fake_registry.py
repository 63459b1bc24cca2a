"""A stand-in for an image registry: the Docker Registry HTTP API v2, as a Docker engine pushes to it.

It serves on 127.0.0.1 (the engine treats 127.0.0.0/8 registries as insecure, so plain HTTP
is what it speaks there): the version check (`GET /v2/`), blob existence (`HEAD`), blob
uploads (`POST` to start, `PATCH` chunks, `PUT ?digest=` to finish, the digest checked),
and manifests (`PUT`, `HEAD`, `GET`; a manifest naming a blob the registry lacks is refused
as a registry refuses it). With `password`, every route asks for HTTP basic auth, as a
private registry does. Routes it does not know answer 404 and are recorded in `unknown`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import threading
import uuid

from aiohttp import web

API_HEADER = {"Docker-Distribution-API-Version": "registry/2.0"}
_NAME = r"(?P<name>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
BLOB = re.compile(rf"^/v2/{_NAME}/blobs/(?P<digest>sha256:[a-f0-9]{{64}})$")
UPLOADS = re.compile(rf"^/v2/{_NAME}/blobs/uploads/$")
UPLOAD = re.compile(rf"^/v2/{_NAME}/blobs/uploads/(?P<upload>[a-f0-9]+)$")
MANIFEST = re.compile(rf"^/v2/{_NAME}/manifests/(?P<reference>[A-Za-z0-9_.:-]+)$")


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"errors": [{"code": code, "message": message}]}, status=status, headers=API_HEADER)


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class FakeRegistry:
    """The registry's blobs and manifests; `start()` serves it on a thread of its own."""

    def __init__(self, *, user: str = "", password: str = ""):
        self.user, self.password = user, password
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}  # (name, tag or digest) -> (type, body)
        self.unknown: list[str] = []
        self._uploads: dict[str, bytearray] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.address = ""  # host:port, as a registry is named in an image reference

    def start(self) -> str:
        self._thread.start()
        self.address = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=30)
        return self.address

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def manifest(self, name: str, tag: str) -> dict:
        """The manifest pushed as `name:tag`, parsed."""
        return json.loads(self.manifests[(name, tag)][1])

    async def _serve(self) -> str:
        app = web.Application(middlewares=[self._auth])
        app.router.add_route("*", "/{tail:.*}", self._route)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"127.0.0.1:{port}"

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if self.password:
            expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            if request.headers.get("Authorization") != expected:
                response = _error(401, "UNAUTHORIZED", "authentication required")
                response.headers["WWW-Authenticate"] = 'Basic realm="fake-registry"'
                return response
        return await handler(request)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path, method = request.path, request.method
        if path == "/v2/" and method in ("GET", "HEAD"):
            return web.json_response({}, headers=API_HEADER)
        if (found := BLOB.match(path)) and method in ("GET", "HEAD"):
            return self._blob(found["digest"], method)
        if (found := UPLOADS.match(path)) and method == "POST":
            return self._begin_upload(found["name"])
        if (found := UPLOAD.match(path)) and found["upload"] in self._uploads and method in ("PATCH", "PUT"):
            return await self._upload(request, found["name"], found["upload"])
        if found := MANIFEST.match(path):
            if method == "PUT":
                return await self._put_manifest(request, found["name"], found["reference"])
            if method in ("GET", "HEAD"):
                return self._get_manifest(found["name"], found["reference"], method)
        self.unknown.append(f"{method} {request.path_qs}")
        return _error(404, "UNSUPPORTED", f"the fake registry does not know {method} {path}")

    def _blob(self, digest: str, method: str) -> web.Response:
        if digest not in self.blobs:
            return _error(404, "BLOB_UNKNOWN", f"blob unknown to registry: {digest}")
        data = self.blobs[digest]
        headers = {**API_HEADER, "Docker-Content-Digest": digest, "Content-Length": str(len(data))}
        return web.Response(
            body=None if method == "HEAD" else data, headers=headers, content_type="application/octet-stream"
        )

    def _begin_upload(self, name: str) -> web.Response:
        upload = uuid.uuid4().hex
        self._uploads[upload] = bytearray()
        return web.Response(
            status=202,
            headers={
                **API_HEADER,
                "Location": f"/v2/{name}/blobs/uploads/{upload}",
                "Range": "0-0",
                "Docker-Upload-UUID": upload,
            },
        )

    async def _upload(self, request: web.Request, name: str, upload: str) -> web.Response:
        received = self._uploads[upload]
        async for chunk in request.content.iter_chunked(1 << 20):
            received += chunk
        location = f"/v2/{name}/blobs/uploads/{upload}"
        if request.method == "PATCH":
            return web.Response(
                status=202,
                headers={
                    **API_HEADER,
                    "Location": location,
                    "Docker-Upload-UUID": upload,
                    "Range": f"0-{max(len(received) - 1, 0)}",
                },
            )
        digest = request.query.get("digest", "")
        if sha256(bytes(received)) != digest:
            return _error(400, "DIGEST_INVALID", f"provided digest {digest} did not match uploaded content")
        self.blobs[digest] = bytes(self._uploads.pop(upload))
        return web.Response(
            status=201,
            headers={**API_HEADER, "Location": f"/v2/{name}/blobs/{digest}", "Docker-Content-Digest": digest},
        )

    async def _put_manifest(self, request: web.Request, name: str, reference: str) -> web.Response:
        body = await request.read()
        manifest = json.loads(body)
        missing = [
            blob["digest"] for blob in [manifest["config"], *manifest["layers"]] if blob["digest"] not in self.blobs
        ]
        if missing:
            return _error(400, "MANIFEST_BLOB_UNKNOWN", f"blob unknown to registry: {missing[0]}")
        digest = sha256(body)
        kind = request.headers.get("Content-Type", manifest.get("mediaType", ""))
        self.manifests[(name, reference)] = self.manifests[(name, digest)] = (kind, body)
        return web.Response(
            status=201,
            headers={**API_HEADER, "Location": f"/v2/{name}/manifests/{digest}", "Docker-Content-Digest": digest},
        )

    def _get_manifest(self, name: str, reference: str, method: str) -> web.Response:
        if (name, reference) not in self.manifests:
            return _error(404, "MANIFEST_UNKNOWN", f"manifest unknown: {name}:{reference}")
        kind, body = self.manifests[(name, reference)]
        headers = {**API_HEADER, "Docker-Content-Digest": sha256(body), "Content-Length": str(len(body))}
        return web.Response(body=None if method == "HEAD" else body, headers=headers, content_type=kind)
