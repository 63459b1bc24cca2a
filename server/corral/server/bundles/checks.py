"""Checks that need the env running: each env is started once to list its tools.

`corral check` and `corral serve` both run these after `load_bundle`, so a tool without a
docstring, a task offering a tool its env lacks, a verifier that does not import, or one that
raises on the report of a freshly reset env is reported before any trainer connects.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corral.protocol.catalog import RESERVED_TOOL_NAMES, ToolSpec
from corral.protocol.rewards import RewardRule, missing_rule_message
from corral.sandboxes import SandboxError, SandboxProvider, SandboxSpec
from corral.server.bundles.format import Task
from corral.server.bundles.model import BundleEnv, LoadedBundle
from corral.server.bundles.problems import Problem
from corral.server.bundles.verifiers import VerifierError, Verify, load_verifiers, rescore_mode, score_episode
from corral.server.connection.base import EnvCallError, EnvDied

PROBE_TIMEOUT_S = 120.0


def sandbox_spec(env: BundleEnv) -> SandboxSpec:
    """Everything a provider needs to run `env`, from its folder and env.toml (a Harbor task's
    env carries its own)."""
    if env.spec is not None:
        return env.spec
    config = env.config
    return SandboxSpec(
        env_name=env.name,
        context_dir=env.folder,
        command=env.command,
        image=config.image,
        dockerfile=config.dockerfile,
        writable=tuple(config.writable),
        scratch_mb=config.scratch_mb,
        resources=env.resources,
        network=config.network,
        agent_shell=config.agent_shell,
        model_channel=config.harness is not None,
    )


@dataclass
class Probe:
    """What starting an env once found: its tools, and the report it gives right after a reset
    to a sample task (the report a verifier meets when the agent does nothing)."""

    tools: list[ToolSpec]
    report: dict[str, Any] | None = None
    sample_failed: str | None = None  # why the reset to the sample task, or its report, failed


async def probe_env(
    bundle: LoadedBundle, env: BundleEnv, provider: SandboxProvider, sample: Task | None = None
) -> Probe:
    """Start `env` of `bundle` once and list its tools; with a `sample` task, reset it to that task and read
    its report. Raise SandboxError saying why when it cannot start."""
    connection = bundle.connect(env, await provider.start(sandbox_spec(env), {"corral.purpose": "probe"}))
    try:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                await connection.initialize()
                listed = await connection.list_tools()
        except TimeoutError:
            raise SandboxError(f"the env did not list its tools within {PROBE_TIMEOUT_S:.0f}s") from None
        probe = Probe([ToolSpec.model_validate(tool) for tool in listed])
        if sample is not None:
            trying = f"its reset to task {sample.id}, to try the task's verifiers on its report,"
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    await connection.hook("corral/reset", {"task": sample.args})
                    probe.report = ((await connection.hook("corral/report")) or {}).get("report", {})
            except EnvCallError as error:
                probe.sample_failed = f"{trying} failed: {error}"
            except TimeoutError:
                probe.sample_failed = f"{trying} did not finish within {PROBE_TIMEOUT_S:.0f}s"
        return probe
    finally:
        await connection.close()


async def check_envs(
    bundle: LoadedBundle, provider: SandboxProvider, envs: Sequence[BundleEnv]
) -> tuple[dict[str, list[ToolSpec]], dict[str, dict[str, Any]]]:
    """The tools of each of `envs` (those the provider could prepare), and the report of a sample
    task of each that Python verifiers score (by task id); adds a problem to `bundle.problems`
    for each env or task that is off."""
    samples = {env.name: _sample_task(bundle, env) for env in envs}
    results = await asyncio.gather(
        *(probe_env(bundle, env, provider, samples[env.name]) for env in envs), return_exceptions=True
    )
    tools_by_env: dict[str, list[ToolSpec]] = {}
    reports: dict[str, dict[str, Any]] = {}
    for env, result in zip(envs, results, strict=True):
        where = bundle.where("envs", env.name)
        if isinstance(result, BaseException):
            if not isinstance(result, (RuntimeError, SandboxError, EnvDied, EnvCallError, OSError)):
                raise result
            bundle.problems.append(Problem(where, f"the env does not start: {result}"))
            continue
        reserved = sorted({tool.name for tool in result.tools} & RESERVED_TOOL_NAMES)
        if reserved:
            bundle.problems.append(
                Problem(where, f"tool name(s) {', '.join(reserved)} are reserved by corral; rename them")
            )
        tools_by_env[env.name] = result.tools
        if result.sample_failed is not None:
            bundle.problems.append(Problem(where, result.sample_failed))
        sample = samples[env.name]
        if sample is not None and result.report is not None:
            reports[sample.id] = result.report
    for task in bundle.tasks.values():
        offered = tools_by_env.get(task.env)
        if offered is None or task.tools is None:
            continue
        names = {tool.name for tool in offered}
        missing = [name for name in task.tools if name not in names]
        if missing:
            bundle.problems.append(
                Problem(
                    f"task {task.id}",
                    f"offers tool(s) {', '.join(missing)} that env {task.env} does not have (it has: {', '.join(sorted(names))}); fix 'tools'",
                )
            )
    return tools_by_env, reports


def _sample_task(bundle: LoadedBundle, env: BundleEnv) -> Task | None:
    """The first task of `env` that a Python verifier scores: the one its verifiers are tried on."""
    return next(
        (
            task
            for task in bundle.tasks.values()
            if task.env == env.name and any(name in bundle.verifiers for name in task.verifiers.values())
        ),
        None,
    )


def check_verifiers(bundle: LoadedBundle, reports: Mapping[str, dict[str, Any]]) -> None:
    """Import every Python verifier, then score each sample task's report (`reports`, by task id)
    with its verifiers: one that raises on the report of an agent that did nothing would leave
    such episodes unscored, so it is a problem, with the file and line it raised at."""
    loaded: dict[str, Verify] = {}
    for name, path in bundle.verifiers.items():
        try:
            rescore_mode(path)
            loaded.update(load_verifiers({name: path}))
        except VerifierError as error:
            # The problem names the file already; drop the absolute path the error starts with.
            bundle.problems.append(Problem(bundle.where("verifiers", path.name), str(error).removeprefix(f"{path}: ")))
    for task_id, report in reports.items():
        task = bundle.tasks[task_id]
        for score_id, name in task.verifiers.items():
            if name not in loaded:
                continue
            try:
                score_episode(task.model_dump(), report, {score_id: name}, loaded)
            except VerifierError as error:
                bundle.problems.append(
                    Problem(
                        bundle.where("verifiers", bundle.verifiers[name].name),
                        f"{error}, scoring task {task_id} right after its reset (the report {_short(report)}); "
                        "a verifier must score every report its env gives, the do-nothing agent's too",
                    )
                )


def _short(report: dict[str, Any]) -> str:
    text = json.dumps(report, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def check_reward_rule(bundle: LoadedBundle, rule: RewardRule) -> None:
    """A task with several scores needs a rule; a named score must exist in every task."""
    for task in bundle.tasks.values():
        score_ids = sorted(task.verifiers)
        if rule is None and len(score_ids) > 1:
            bundle.problems.append(Problem(f"task {task.id}", missing_rule_message(score_ids)))
            return
        if isinstance(rule, str) and "/" not in rule and rule not in task.verifiers:
            bundle.problems.append(
                Problem(
                    f"task {task.id}",
                    f"reward {rule!r} is not one of its scores ({', '.join(score_ids)}); pick one of those",
                )
            )
            return
