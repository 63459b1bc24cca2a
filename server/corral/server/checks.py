"""Checks that need the env running: each env is started once to list its tools.

`corral check` and `corral serve` both run these after `load_bundle`, so a tool without a
docstring, a task offering a tool its env lacks, or a verifier that does not import is
reported before any trainer connects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from corral.client.catalog import END_TURN, ToolSpec
from corral.client.rewards import RewardRule, missing_rule_message
from corral.sandboxes import SandboxError, SandboxProvider, SandboxSpec
from corral.server.bundle import BundleEnv, LoadedBundle, Problem
from corral.server.envproc import EnvCallError, EnvDied, EnvProcess
from corral.server.verifiers import VerifierError, load_verifiers

PROBE_TIMEOUT_S = 120.0
RESERVED_TOOL_NAMES = {END_TURN, "reset", "get_reward"}


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
    )


async def probe_tools(env: BundleEnv, provider: SandboxProvider) -> list[ToolSpec]:
    """Start `env` once and list its tools; raise SandboxError saying why when it cannot."""
    sandbox = await provider.start(sandbox_spec(env), {"corral.purpose": "probe"})
    try:
        process = EnvProcess(sandbox)
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            await process.initialize()
            listed = await process.call("tools/list")
        return [ToolSpec.model_validate(tool) for tool in listed["tools"]]
    except TimeoutError:
        raise SandboxError(f"the env did not list its tools within {PROBE_TIMEOUT_S:.0f}s") from None
    finally:
        await sandbox.close()


async def check_envs(bundle: LoadedBundle, provider: SandboxProvider, envs: Sequence[BundleEnv]) -> dict[str, list[ToolSpec]]:
    """The tools of each of `envs` (those the provider could prepare); adds a problem to
    `bundle.problems` for each env or task that is off."""
    results = await asyncio.gather(*(probe_tools(env, provider) for env in envs), return_exceptions=True)
    tools_by_env: dict[str, list[ToolSpec]] = {}
    for env, result in zip(envs, results, strict=True):
        where = bundle.where("envs", env.name)
        if isinstance(result, BaseException):
            if not isinstance(result, (RuntimeError, SandboxError, EnvDied, EnvCallError, OSError)):
                raise result
            bundle.problems.append(Problem(where, f"the env does not start: {result}"))
            continue
        reserved = sorted({tool.name for tool in result} & RESERVED_TOOL_NAMES)
        if reserved:
            bundle.problems.append(Problem(where, f"tool name(s) {', '.join(reserved)} are reserved by corral; rename them"))
        tools_by_env[env.name] = result
    for task in bundle.tasks.values():
        offered = tools_by_env.get(task.env)
        if offered is None or task.tools is None:
            continue
        names = {tool.name for tool in offered}
        missing = [name for name in task.tools if name not in names]
        if missing:
            bundle.problems.append(Problem(
                f"task {task.id}",
                f"offers tool(s) {', '.join(missing)} that env {task.env} does not have (it has: {', '.join(sorted(names))}); fix 'tools'",
            ))
    return tools_by_env


def check_verifiers(bundle: LoadedBundle) -> None:
    for name, path in bundle.verifiers.items():
        try:
            load_verifiers({name: path})
        except VerifierError as error:
            # The problem names the file already; drop the absolute path the error starts with.
            bundle.problems.append(Problem(bundle.where("verifiers", path.name), str(error).removeprefix(f"{path}: ")))


def check_reward_rule(bundle: LoadedBundle, rule: RewardRule) -> None:
    """A task with several scores needs a rule; a named score must exist in every task."""
    for task in bundle.tasks.values():
        score_ids = sorted(task.verifiers)
        if rule is None and len(score_ids) > 1:
            bundle.problems.append(Problem(f"task {task.id}", missing_rule_message(score_ids)))
            return
        if isinstance(rule, str) and "/" not in rule and rule not in task.verifiers:
            bundle.problems.append(Problem(
                f"task {task.id}", f"reward {rule!r} is not one of its scores ({', '.join(score_ids)}); pick one of those"
            ))
            return
