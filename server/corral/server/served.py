"""The bundle as the server serves it: splits, toolsets, verifiers, reward rule, deadlines.

Built once at start-up (`ServedBundle.open`), after every check has passed; sessions read it
and never change it, except the provider, which starts their sandboxes.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from corral.client.protocol import END_TURN_TOOL, ResetData, TaskInfo, Toolset, ToolSpec
from corral.client.rewards import RewardRule
from corral.sandboxes import SandboxProvider, make_provider
from corral.server.bundle import RESERVED_SPLIT, Bundle, Problem, Task, load_bundle
from corral.server.checks import check_envs, check_reward_rule, check_verifiers, sandbox_spec
from corral.server.verifiers import Verify, load_verifiers

if TYPE_CHECKING:
    from corral.sandboxes.docker_provider import DockerEnv, DockerProvider

log = logging.getLogger("corral.server")
DEFAULT_TOOL_TIMEOUT_S = 60.0
DEFAULT_RESET_TIMEOUT_S = 600.0


class BundleProblems(ValueError):
    """The bundle cannot be served; the message lists every problem with its fix."""

    def __init__(self, root: Path, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{root} has {len(problems)} problem(s):\n{lines}")


@dataclass(frozen=True)
class ServeOptions:
    """How to serve a bundle; None takes the bundle's [serve] value, then corral's default."""

    sandbox: str = "auto"
    max_concurrent_envs: int = 8
    reward: RewardRule = None
    tool_timeout_s: float | None = None
    reset_timeout_s: float | None = None
    token: str | None = None
    warm_pool: int = 0  # docker: started containers waiting per env
    instance: str | None = None  # docker: whose leftover containers the reaper removes on start


@dataclass
class ServedBundle:
    bundle: Bundle
    provider: SandboxProvider
    toolsets: dict[str, Toolset]
    toolset_of: dict[str, str]  # task id -> toolset name
    verifiers: dict[str, Verify]
    reward: RewardRule
    tool_timeout_s: float
    reset_timeout_s: float
    options: ServeOptions

    @classmethod
    async def open(cls, root: Path, options: ServeOptions) -> ServedBundle:
        """Load and check the bundle, probe its envs; raise BundleProblems if anything is off."""
        bundle = load_bundle(root)
        provider = make_provider(options.sandbox, instance=options.instance, warm_pool=options.warm_pool)
        images_ready = provider.name != "docker" or not bundle.envs or await _prepare_docker(bundle, provider)
        tools_by_env = await check_envs(bundle, provider) if bundle.envs and images_ready else {}
        check_verifiers(bundle)
        reward = options.reward if options.reward is not None else bundle.manifest.serve.reward
        check_reward_rule(bundle, reward)
        if bundle.problems:
            await provider.aclose()
            raise BundleProblems(root, bundle.problems)
        toolsets, toolset_of = _toolsets(bundle, tools_by_env)
        serve = bundle.manifest.serve
        return cls(
            bundle=bundle,
            provider=provider,
            toolsets=toolsets,
            toolset_of=toolset_of,
            verifiers=load_verifiers(bundle.verifiers),
            reward=reward,
            tool_timeout_s=options.tool_timeout_s or serve.tool_timeout_s or DEFAULT_TOOL_TIMEOUT_S,
            reset_timeout_s=options.reset_timeout_s or serve.reset_timeout_s or DEFAULT_RESET_TIMEOUT_S,
            options=options,
        )

    @property
    def name(self) -> str:
        return self.bundle.manifest.name

    def task_info(self, split: str, index: int) -> TaskInfo:
        task = self.bundle.splits[split][index]
        return TaskInfo(
            task_id=task.id,
            split=split,
            index=index,
            toolset=self.toolset_of[task.id],
            system_prompt=task.system_prompt,
            prompt=task.prompt,
            scores=sorted(task.verifiers),
        )

    def find_task(self, data: ResetData) -> Task:
        """The task a reset names; raise LookupError with what to send instead."""
        if data.split is not None or data.index is not None:
            split = data.split or RESERVED_SPLIT
            if split not in self.bundle.splits:
                raise LookupError(f"no split {split!r}; the splits are: {', '.join(self.bundle.splits)}")
            tasks = self.bundle.splits[split]
            if data.index is None or data.index >= len(tasks):
                raise LookupError(f"split {split!r} has {len(tasks)} tasks; send an index from 0 to {len(tasks) - 1}")
            task = tasks[data.index]
            if data.task_id is not None and data.task_id != task.id:
                raise LookupError(
                    f"task {data.index} of split {split!r} is {task.id!r}, not {data.task_id!r}: "
                    "the server's bundle changed since the dataset was built; rebuild it"
                )
            return task
        if data.task_id is not None:
            if data.task_id not in self.bundle.tasks:
                raise LookupError(f"no task {data.task_id!r} in bundle {self.name}")
            return self.bundle.tasks[data.task_id]
        return self.bundle.splits[RESERVED_SPLIT][0]

    def offered_tools(self, task: Task) -> list[ToolSpec]:
        """The turn's tools: the env tools the task offers, then end_turn."""
        return self.toolsets[self.toolset_of[task.id]].tools

    def start_pools(self) -> None:
        """Start warm pools, if the provider keeps them (on the loop that serves sessions)."""
        start_pools = getattr(self.provider, "start_pools", None)
        if start_pools is not None:
            start_pools([sandbox_spec(env) for env in self.bundle.envs.values()])

    async def aclose(self) -> None:
        await self.provider.aclose()


def default_instance(port: int) -> str:
    """A server's instance name: this machine's name and its port, the same after a restart,
    different for a server on another port (so concurrent servers never reap each other)."""
    return f"{socket.gethostname()}-{port}"


def docker_envs(bundle: Bundle) -> list[DockerEnv]:
    """How the docker provider builds and runs each env of `bundle` (needs corral[docker])."""
    from corral.sandboxes.docker_images import EnvImage  # docker is optional
    from corral.sandboxes.docker_provider import DockerEnv

    return [
        DockerEnv(
            EnvImage(env.name, env.folder, dockerfile=env.config.dockerfile, image=env.config.image),
            writable=tuple(env.config.writable),
            scratch_mb=env.config.scratch_mb,
        )
        for env in bundle.envs.values()
    ]


async def _prepare_docker(bundle: Bundle, provider: DockerProvider) -> bool:
    """Reap a killed run's containers and build missing images before any session is accepted;
    False (with the problem added to the bundle) when an image cannot be had."""
    from corral.sandboxes.docker_images import ImageError

    envs = docker_envs(bundle)
    missing = [env.image.tag for env in envs if not await provider.call(provider.has_image, env.image.tag)]
    if missing:
        log.info("building %d missing env image(s) before accepting sessions: %s", len(missing), ", ".join(missing))
    try:
        await provider.prepare(envs)
    except ImageError as error:
        bundle.problems.append(Problem(bundle.where("envs"), str(error)))
        return False
    return True


def _toolsets(bundle: Bundle, tools_by_env: dict[str, list[ToolSpec]]) -> tuple[dict[str, Toolset], dict[str, str]]:
    """Group tasks by (env, offered tools). A toolset is named after its env when the env has
    one; otherwise after the env and its tools, e.g. `mail:read+send`."""
    keys: dict[str, tuple[str, tuple[str, ...]]] = {}
    for task in bundle.tasks.values():
        env_tools = tools_by_env[task.env]
        names = tuple(task.tools) if task.tools is not None else tuple(t.name for t in env_tools)
        keys[task.id] = (task.env, names)
    per_env: dict[str, set[tuple[str, ...]]] = {}
    for env, names in keys.values():
        per_env.setdefault(env, set()).add(names)
    toolsets: dict[str, Toolset] = {}
    toolset_of: dict[str, str] = {}
    for task_id, (env, names) in keys.items():
        name = env if len(per_env[env]) == 1 else f"{env}:{'+'.join(names)}"
        if name not in toolsets:
            by_name = {tool.name: tool for tool in tools_by_env[env]}
            toolsets[name] = Toolset(name=name, env=env, tools=[by_name[n] for n in names] + [END_TURN_TOOL])
        toolset_of[task_id] = name
    return toolsets, toolset_of

