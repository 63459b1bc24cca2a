"""`corral/episode/fork {n}`: n copies of a session's episode at its current turn, each on a new
session a client attaches to by its id (`/ws?session_id=`, or `params.session_id` over
`POST /mcp`), as to one created by `openenv/session/create`.

The copies are made as the task's env declares (`fork` in its env.toml: replay, or a copy of
its files where the provider can make one; `episodes.fork`). A fork takes n sessions under `--max-concurrent-envs` or none, and
gives all n copies or none: one that fails closes them all. The original is never touched:
its calls are read, its env is not called.
"""

from __future__ import annotations

import asyncio
import time

from corral.protocol.frames import ForkRefusal
from corral.server.episodes.fork import ForkFailed, copied, copy_of, replay
from corral.server.serving.sessions import ServedSession, SessionRegistry


async def fork_session(registry: SessionRegistry, session: ServedSession, n: int) -> list[ServedSession]:
    """n new sessions, each holding a copy of `session`'s episode; ForkFailed or
    CapacityReached (nothing left started) when it cannot be forked."""
    original = session.episode
    if original is None or original.done:
        raise ForkFailed(
            ForkRefusal.NO_EPISODE,
            "no episode to fork on this session: fork one that has been reset and has not ended",
        )
    env, served = original.task.env, registry.served
    declared = served.bundle.envs[env].config.fork
    mode = served.fork_modes().get(env)
    if declared is not None and mode is None:
        raise ForkFailed(
            ForkRefusal.FORK_UNSUPPORTED,
            f'env {env!r} declares fork = "{declared}", and the {served.provider.kind} sandbox this server '
            "runs cannot copy a sandbox's files into another: serve the bundle with --sandbox local or "
            "--sandbox docker to fork it, or reset a new episode for each copy",
        )
    if mode is None:
        raise ForkFailed(
            ForkRefusal.FORK_UNSUPPORTED,
            f"env {env!r} declares no fork mode, so its episodes cannot be forked: an env whose "
            "state lives in its process's memory and follows from its task and the calls made "
            f'declares fork = "replay" in envs/{env}/env.toml, one whose state lives in its writable '
            'folders fork = "copy" (docs/bundle-format.md); otherwise reset a new episode for each copy',
        )
    calls = list(original.calls)  # the calls answered by now; one in flight is not part of the copy
    copies = registry.open_many(n)
    episodes = [copy_of(original, each.session_id) for each in copies]
    for each, episode in zip(
        copies, episodes, strict=True
    ):  # held from the start: the reaper gives it an episode's time
        each.episode = episode
    try:
        make = copied if mode == "copy" else replay
        answered = await asyncio.gather(*(make(each, original, calls) for each in episodes), return_exceptions=True)
        if failures := [error for error in answered if error is not None]:
            raise next((error for error in failures if isinstance(error, ForkFailed)), failures[0])
    except BaseException:  # a copy failed, or the fork's caller left: no copy is left behind
        await asyncio.gather(*(registry.release(each) for each in copies))
        raise
    for each in copies:
        each.idle_since = time.monotonic()  # its client's time to attach runs from now
    return copies
