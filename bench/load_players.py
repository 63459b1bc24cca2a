"""The bundles bench/load.py plays, each with a fixed, cheap policy whose reward is known.

A player resets its split's first task, makes its moves, ends the turn and checks the reward:
every episode must end scored, and with the reward its moves earn.

- toybox (tests/fixtures/toybox): say `apple` (1.0) or `pear` (0.0), alternately;
- gridsim: submit an idle day (24 zeros: feasible on the first task, scores 0.2);
- shellfix: run `ls` in the repository and leave the bug as it is (the hidden tests fail, 0.0):
  the verification still runs in full (the agent's files copied into a fresh container).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from websockets.asyncio.client import ClientConnection

from corral.protocol.frames import CallTool, CallToolObservation, ResetData, ResetRequest, StepRequest

from common import exchange

# toybox's envs name no image; in containers they run on the one the docker tests build.
DOCKERFILE = Path("tests") / "fixtures" / "dockerbox" / "envs" / "probe" / "Dockerfile"


@dataclass
class Tally:
    episodes: int = 0
    errors: list[str] = field(default_factory=list)
    wrong_rewards: int = 0
    unscored: int = 0
    connect_s: list[float] = field(default_factory=list)
    reset_s: list[float] = field(default_factory=list)
    tool_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Player:
    """A bundle (its folder in a checkout), the split played, and per turn: moves and reward."""

    folder: str
    split: str
    moves: tuple[tuple[tuple[str, dict], ...], ...]  # one policy per turn number, cycled
    rewards: tuple[float, ...]

    def bundle(self, checkout: Path, sandbox: str, scratch: Path) -> Path:
        """The bundle as `checkout` has it; toybox in containers: a copy with a Dockerfile per env."""
        bundle = checkout / self.folder
        if sandbox != "docker" or self.folder != TOYBOX:
            return bundle
        copy = Path(shutil.copytree(bundle, scratch / checkout.name / bundle.name))
        for env in (copy / "envs").iterdir():
            shutil.copy(checkout / DOCKERFILE, env / "Dockerfile")
        return copy

    async def reset(self, socket_: ClientConnection, tally: Tally) -> None:
        started = time.perf_counter()
        await exchange(socket_, ResetRequest(data=ResetData(split=self.split, index=0)))
        tally.reset_s.append(time.perf_counter() - started)

    async def finish(self, socket_: ClientConnection, turn: int, tally: Tally) -> None:
        """Play turn `turn`'s moves, end the turn, and check the reward is the one they earn."""
        for tool, arguments in self.moves[turn % len(self.moves)]:
            started = time.perf_counter()
            await exchange(socket_, StepRequest(data=CallTool(tool_name=tool, arguments=arguments)))
            tally.tool_s.append(time.perf_counter() - started)
        ended = (
            await exchange(socket_, StepRequest(data=CallTool(tool_name="end_turn", arguments={"response": ""})))
        ).parse(CallToolObservation)
        tally.episodes += 1
        if ended.reward is None:
            tally.unscored += 1
        elif ended.reward != self.rewards[turn % len(self.rewards)]:
            tally.wrong_rewards += 1


TOYBOX = "tests/fixtures/toybox"
PLAYERS = {
    "toybox": Player(TOYBOX, "toy", ((("say", {"text": "apple"}),), (("say", {"text": "pear"}),)), (1.0, 0.0)),
    "gridsim": Player("bundles/gridsim", "train", ((("submit_schedule", {"actions": [0] * 24}),),), (0.2,)),
    "shellfix": Player("bundles/shellfix", "train", ((("bash", {"command": "ls"}),),), (0.0,)),
}
