"""Who caused an episode's ending, on the evidence (the rules are `endings.py`'s).

An ending the agent seems to have caused is the platform's when the sandboxes' provider fails
its own check now (an engine that stopped answering). One that either side could have caused
is the agent's unless the canary fails too: the same task played untouched in a fresh sandbox,
as an agent that does nothing would play it (every turn answered with an empty reply).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from corral.errors import SandboxError
from corral.protocol.frames import REPLAY_RESET_DEADLINES, Limits
from corral.server.episodes.endings import ENDINGS, Ending
from corral.server.episodes.runtime import EpisodeRuntime


class Canary(Protocol):
    """An episode of the same task, not yet started, that nobody acts in."""

    @property
    def limits(self) -> Limits: ...

    @property
    def done(self) -> bool: ...

    @property
    def status(self) -> str | None: ...

    @property
    def reason(self) -> str | None: ...

    async def start(self) -> Any: ...

    async def end_turn(self, response: str) -> Any: ...

    async def close(self) -> None: ...


async def judge(
    ending: Ending, reason: str, runtime: EpisodeRuntime, canary: Callable[[], Canary] | None
) -> tuple[Ending, bool, str]:
    """Who caused `ending`, on the evidence: the ending to record, whether it is the agent's,
    and the reason with the evidence added. `canary` makes the untouched episode when one is
    needed; None for an episode that is itself one (its failures are the platform's)."""
    if ending.blame == "agent":
        if (fault := await platform_fault(runtime)) is not None:
            return ENDINGS["sandbox_failed"], False, f"{reason}; and {fault}"
        return ending, True, reason
    if ending.blame == "platform" or canary is None:
        return ending, False, reason
    broken = await play_untouched(canary())
    runtime.metrics.untouched_replays.labels(platform="broken" if broken else "sound").inc()
    if broken is None:
        return (
            ending,
            True,
            (
                f"{reason}; the same task played untouched in a fresh sandbox was scored, so "
                "the failure came from what the agent did"
            ),
        )
    return ending, False, f"{reason}; and the same task played untouched in a fresh sandbox failed too: {broken}"


async def play_untouched(canary: Canary) -> str | None:
    """Play `canary` to its end: None when it is scored, so the provider, the env and the
    verifiers work on this task; else why it was not."""
    deadline = REPLAY_RESET_DEADLINES * canary.limits.reset_timeout_s
    try:
        async with asyncio.timeout(deadline):
            await canary.start()
            while not canary.done:
                await canary.end_turn("")
    except TimeoutError:
        return f"it did not end within {deadline:g}s"
    except Exception as error:  # noqa: BLE001 - any failure of the replay is the platform's evidence
        return f"corral failed playing it: {type(error).__name__}: {error}"
    finally:
        await canary.close()
    return None if canary.status == "scored" else canary.reason


async def platform_fault(runtime: EpisodeRuntime) -> str | None:
    """Why the platform failed, when the sandboxes' provider says it did; None when it answers,
    and the agent's doing stands."""
    try:
        await runtime.check_platform()
    except SandboxError as error:
        return str(error)
    return None
