"""`corral build --push REGISTRY`: an env's built image, tagged and pushed where the cluster pulls it.

The kubernetes provider pulls `REGISTRY/corral-env/<env>:<digest>` (env_digest.in_registry);
this tags the local content-tagged image with that name and has this machine's Docker engine
push it. The engine does the talking (docker-py passes the credentials `docker login` wrote),
so what it cannot reach, or a registry that refuses it, is said with the fix.
"""

from __future__ import annotations

import docker
import docker.errors

from corral.errors import ImageError
from corral.sandboxes.base import Progress
from corral.sandboxes.env_digest import in_registry

# What the engine says when the registry is not there, and when it speaks plain HTTP.
UNREACHABLE = (
    "connection refused",
    "no such host",
    "i/o timeout",
    "no route to host",
    "client.timeout",
    "network is unreachable",
    "connection reset",
)
PLAIN_HTTP = "server gave http response to https client"
REFUSED = ("unauthorized", "authentication required", "no basic auth credentials", "denied", "forbidden")
REPORTED = ("Pushed", "Layer already exists")  # a layer's last word; the rest is its progress bar


def push_image(client: docker.DockerClient, image: str, registry: str, progress: Progress) -> str:
    """Tag the local `image` as `REGISTRY/image` and push it; the name pushed. Blocking: run it
    off the loop. Raises ImageError naming the fix."""
    if "://" in registry:
        raise ImageError(f"--push takes a registry as host[:port][/path], without a scheme: not {registry!r}")
    remote = in_registry(registry, image)
    repository, tag = remote.rsplit(":", 1)
    try:
        client.images.get(image).tag(repository, tag)
    except docker.errors.APIError as error:
        raise ImageError(f"tagging {image} as {remote} failed: {error.explanation or error}") from None
    progress(f"pushing {remote}")
    digest, retrying = "", False
    try:
        for chunk in client.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise ImageError(_why_not(remote, chunk.get("errorDetail", {}).get("message", chunk["error"])))
            status = chunk.get("status", "")
            if status in REPORTED:
                progress(f"  {chunk.get('id', '')}: {status}")
            elif status.startswith("Retrying") and not retrying:  # a wrong password, a registry failing
                retrying = True
                progress(
                    f"  {chunk.get('id', '')}: the registry failed an upload; the engine retries for up to a "
                    "minute before it gives up"
                )
            digest = chunk.get("aux", {}).get("Digest", digest)
    except docker.errors.APIError as error:
        raise ImageError(_why_not(remote, str(error.explanation or error))) from None
    progress(f"pushed {remote} ({digest or 'no digest reported'})")
    return remote


def _why_not(remote: str, detail: str) -> str:
    """The push of `remote` failed with the engine's `detail`: what went wrong and the fix."""
    host = remote.split("/", 1)[0]
    said = detail.strip().lower()
    if PLAIN_HTTP in said:
        return (
            f"pushing {remote} failed: the registry {host} speaks plain HTTP, which the Docker engine uses only "
            f'for registries it is told are insecure; add "{host}" to insecure-registries in '
            f"/etc/docker/daemon.json and restart the engine, or serve the registry over TLS ({detail.strip()})"
        )
    if any(word in said for word in UNREACHABLE):
        return (
            f"pushing {remote} failed: the registry {host} did not answer ({detail.strip()}); check the address, "
            "that the registry runs, and that this machine's Docker engine reaches it (the engine pushes, "
            "not corral)"
        )
    if any(word in said for word in REFUSED):
        return (
            f"pushing {remote} failed: the registry {host} refused it ({detail.strip()}); log in with "
            f"`docker login {host}` as a user that may push to {remote.rsplit(':', 1)[0]}"
        )
    return f"pushing {remote} failed: {detail.strip()}"
