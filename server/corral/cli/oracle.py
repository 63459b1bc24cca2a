"""`corral check DIR --oracle` and `--null`: trust a corpus before spending GPU hours on it.

The oracle plays each task that has a solution in a real episode, through the agent's own
tools and the task's own verifier: `write_file` puts solution/ at /solution (where an agent
that is not root cannot write: at /tmp/solution then), `bash` runs `solve.sh` there (as
Harbor's oracle agent does: in the working folder, with DEBIAN_FRONTEND=noninteractive and
[solution] env), then `end_turn`. A task it does not score
1 is broken (or needs what corral does not give it, a network say). The null agent ends its
turn at once: a task that scores above 0 then passes without the agent doing anything.
Each finding says why, with the end of the tests' output.
"""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass
from pathlib import Path

from corral.errors import ConfigError
from corral.protocol.frames import CallToolObservation, ResetObservation
from corral.server.episodes.episode import ServedEpisode
from corral.server.harbor.part import HarborPart, harbor_part
from corral.server.serving.served import ServedBundle

SOLUTION_DIR = "/solution"
SOLUTION_DIR_NOT_ROOT = "/tmp/solution"  # an agent that is not root cannot make /solution
OUTPUT_SHOWN = 600  # characters of the tests' (or solve.sh's) output a finding quotes


@dataclass(frozen=True)
class Verdict:
    """One task played by the oracle or the null agent."""

    task_id: str
    agent: str  # "oracle" or "null"
    reward: float | None
    ok: bool  # the oracle scored 1, the null agent 0
    why: str = ""  # when not ok: what happened, and what the tests printed


async def play_and_close(served: ServedBundle, *, oracle: bool, null: bool) -> tuple[str, bool]:
    """`corral check`'s --oracle and --null, as asked: the lines to print and whether every task
    passed; then close `served`. Raises ConfigError for a bundle that is not Harbor tasks."""
    try:
        if not (oracle or null):
            return "", True
        part = _part(served)
        verdicts = await check_tasks(served, oracle=oracle, null=null)
        without = [task_id for task_id, task in part.tasks.items() if not task.has_solution] if oracle else []
        return report(verdicts, without)
    finally:
        await served.aclose()


async def check_tasks(served: ServedBundle, *, oracle: bool, null: bool, at_once: int = 2) -> list[Verdict]:
    """Play every task of the bundle with the agents asked for, `at_once` episodes at a time."""
    part = _part(served)
    slots = asyncio.Semaphore(at_once)
    plays: list[tuple[str, Path | None]] = []  # (task, its solution: the oracle's; None: the null agent's)
    for task_id, task in part.tasks.items():
        if oracle and task.has_solution:
            plays.append((task_id, task.solution_dir))
        if null:
            plays.append((task_id, None))

    async def one(task_id: str, solution: Path | None) -> Verdict:
        async with slots:
            return await play(served, task_id, solution)

    # A TaskGroup: should one play fail, the others are cancelled (and close their sandboxes) first.
    async with asyncio.TaskGroup() as group:
        running = [group.create_task(one(task_id, solution)) for task_id, solution in plays]
    return [task.result() for task in running]


async def play(served: ServedBundle, task_id: str, solution: Path | None) -> Verdict:
    """One episode of `task_id`: the oracle's (with `solution`, the task's solution/) or the null agent's."""
    agent = "oracle" if solution is not None else "null"
    episode = ServedEpisode(served, served.bundle.tasks[task_id], limits=served.limits, session_id=f"check-{agent}")
    try:
        opened = await episode.start()
        if opened.done:
            return _verdict(task_id, agent, opened, "the episode could not start")
        solved = ""
        if solution is not None:
            said = await _solve(episode, served, task_id, solution)
            if isinstance(said, CallToolObservation) and said.done:
                return _verdict(task_id, agent, said, "the episode ended while solve.sh ran")
            solved = said if isinstance(said, str) else ""
        ended = await episode.call_tool("end_turn", {"response": ""})
        return _verdict(task_id, agent, ended, solved)
    finally:
        await episode.close()


async def _solve(
    episode: ServedEpisode, served: ServedBundle, task_id: str, solution: Path
) -> str | CallToolObservation:
    """Put solution/ at /solution (/tmp/solution for an agent that is not root) and run solve.sh
    with the agent's tools: solve.sh's output, or the observation that went wrong."""
    task = _part(served).tasks[task_id]
    where = SOLUTION_DIR if task.agent_may_be_root else SOLUTION_DIR_NOT_ROOT
    for path in sorted(solution.rglob("*")):
        if not path.is_file():
            continue
        try:
            content = path.read_text()
        except UnicodeDecodeError:
            return f"solution/{path.relative_to(solution)} is not text, which write_file cannot put"
        written = await episode.call_tool(
            "write_file", {"path": f"{where}/{path.relative_to(solution).as_posix()}", "content": content}
        )
        if written.error is not None or written.done:
            return written if written.done else f"write_file failed: {written.answer}"
    config = task.config
    variables = {"DEBIAN_FRONTEND": "noninteractive", **(config.solution.get("env") or {})}
    assignments = " ".join(f"{key}={shlex.quote(str(value))}" for key, value in variables.items())
    budget = int(min(episode.task.time_budget_s or 600, 600))
    ran = await episode.call_tool("bash", {"command": f"{assignments} bash {where}/solve.sh", "timeout_s": budget})
    return ran if ran.done else ran.answer


def _part(served: ServedBundle) -> HarborPart:
    part = harbor_part(served.bundle)
    if part is None:
        raise ConfigError(
            "--oracle and --null play Harbor tasks (a folder of task.toml folders); this is a corral bundle"
        )
    return part


def _verdict(task_id: str, agent: str, observed: ResetObservation | CallToolObservation, solved: str) -> Verdict:
    reward = observed.reward if observed.done else None
    ok = reward == (1.0 if agent == "oracle" else 0.0)
    if ok:
        return Verdict(task_id, agent, reward, True)
    if observed.status not in ("scored", None):
        return Verdict(
            task_id, agent, reward, False, f"{solved}: {observed.reason}" if solved else str(observed.reason)
        )
    tests = "\n".join((observed.metadata.get("verifier_output") or {}).values())
    shown = tests[-OUTPUT_SHOWN:] or solved[-OUTPUT_SHOWN:]
    what = f"scored {reward} without the agent doing anything" if agent == "null" else f"scored {reward}"
    return Verdict(task_id, agent, reward, False, f"{what}; the tests said:\n{shown}" if shown else what)


def report(verdicts: list[Verdict], without_solution: list[str]) -> tuple[str, bool]:
    """The lines `corral check` prints, and whether every task passed."""
    lines, clean = [], True
    for agent, passing in (("oracle", "score 1 with their solution"), ("null", "score 0 when the agent does nothing")):
        played = [verdict for verdict in verdicts if verdict.agent == agent]
        if not played:
            continue
        failed = [verdict for verdict in played if not verdict.ok]
        lines.append(f"{agent}: {len(played) - len(failed)} of {len(played)} task(s) {passing}")
        if agent == "oracle" and without_solution:
            lines.append(f"  no solution/ (not played): {', '.join(without_solution)}")
        for verdict in failed:
            clean = False
            lines.append(f"  FLAGGED {verdict.task_id}: " + verdict.why.replace("\n", "\n    "))
    return "\n".join(lines), clean
