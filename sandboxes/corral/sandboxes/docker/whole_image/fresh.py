"""The fresh container a Harbor task's tests run in (docker.whole_image.snapshot): its configuration, made
from the agent's container's, and whether the tests in it run as root."""

from __future__ import annotations

from collections.abc import Mapping

import docker.types

from corral.sandboxes.docker.engine import Engine
from corral.sandboxes.shared.pristine import pristine_environment

VERIFIER_HOME = "/corral-verifier-home"  # the command's HOME: an empty volume the agent never saw
SH = "/bin/sh"
# The command waits for corral's word that the agent's links were checked, then reads no stdin.
GATE = 'read -r _ && exec "$@" </dev/null'


def fresh_config(
    config: Mapping,
    image: str,
    name: str,
    *,
    mounts: list[docker.types.Mount],
    user: str,
    as_root: bool,
    environment: Mapping[str, str] | None,
    command: list[str],
) -> dict:
    """create_container's arguments for the verifier: the agent container's, with the commit
    as its image, docker's init as its first process, the command as its one child, the
    keeper's volumes (`mounts`: the files, HOME, the result folders), and no log kept. Tests that run
    as root (`as_root`) may also change user, so that they can run the agent's programs as
    a user that cannot write their verdict (`runuser -u worker -- ...`)."""
    host_config = {
        **config["host_config"],
        "AutoRemove": False,
        "Init": True,
        "LogConfig": {"Type": "none", "Config": {}},
        "Mounts": mounts,
        **({"CapAdd": ["SETUID", "SETGID"]} if as_root else {}),
    }
    labels = {key: value for key, value in config["labels"].items() if key != "corral.pool"}
    return {
        "image": image,
        "command": [SH, "-c", GATE, "corral-gate", *command],
        "entrypoint": [""],
        "user": user,
        "environment": pristine_environment({**config["environment"], **(environment or {})}, home=VERIFIER_HOME),
        "working_dir": config.get("working_dir"),
        "name": name,
        "labels": {**labels, "corral.purpose": "verify"},
        "host_config": host_config,
        "stdin_open": True,
        "tty": False,
        "detach": True,
        "use_config_proxy": False,
    }


async def runs_as_root(engine: Engine, image: str, user: str) -> bool:
    """Whether a container of `image` run as `user` runs as root: the image's own USER where
    `user` is empty, and root where that is empty too."""
    user = user or (await engine.call(engine.api.inspect_image, image))["Config"].get("User") or ""
    return user.split(":")[0] in ("", "root", "0")
