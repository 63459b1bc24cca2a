"""The bundle as the server serves it: splits, toolsets, verifiers, reward rule, deadlines.

Built once at start-up (`ServedBundle.open`), after every check has passed; sessions read it
and never change it, except the provider, which starts their sandboxes. It is its episodes'
runtime (`episode_runtime.EpisodeRuntime`): what an episode needs of the server, it asks here.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.errors import BundleInvalid, SandboxError
from corral.protocol.catalog import END_TURN, END_TURN_TOOL, RUN_AGENT_TOOL, TaskInfo, Toolset, ToolSpec
from corral.protocol.frames import (
    DEFAULT_RESET_TIMEOUT_S,
    DEFAULT_TOOL_TIMEOUT_S,
    Limits,
    ResetData,
)
from corral.protocol.records import EpisodeRecord
from corral.protocol.rewards import RewardRule
from corral.sandboxes import Progress, Sandbox, SandboxProvider, make_provider
from corral.server.bundles.checks import check_envs, check_reward_rule, check_verifiers, sandbox_spec
from corral.server.bundles.format import HarnessConfig, Task
from corral.server.bundles.model import RESERVED_SPLIT, BundleEnv, LoadedBundle
from corral.server.bundles.problems import Problem
from corral.server.bundles.verifier_pool import VerifierPool
from corral.server.bundles.verifiers import CommandScore, run_command_verifier, verifier_digest
from corral.server.connection.base import EnvConnection
from corral.server.formats import load_bundle
from corral.server.metrics import Metrics
from corral.server.serving.options import ServeOptions
from corral.server.serving.recording import EpisodeRecorder

log = logging.getLogger("corral.server")


@dataclass
class ServedBundle:
    bundle: LoadedBundle
    provider: SandboxProvider
    toolsets: dict[str, Toolset]
    toolset_of: dict[str, str]  # task id -> toolset name
    verifiers: VerifierPool  # the Python verifiers, each episode's scored in a worker process
    metrics: Metrics
    starts: asyncio.Semaphore  # a slot for each sandbox starting (options.concurrent_starts)
    reward: RewardRule
    limits: Limits
    options: ServeOptions
    recorder: EpisodeRecorder | None = None

    @classmethod
    async def open(cls, root: Path, options: ServeOptions, progress: Progress = log.info) -> ServedBundle:
        """Load and check the bundle, prepare and probe its envs (`progress` gets each line of
        a long preparation, an image build's); raise BundleInvalid if anything is off."""
        bundle = load_bundle(root, network=options.network)
        provider = bundle.serving_provider(
            make_provider(
                options.sandbox,
                instance=options.instance,
                warm_pool=options.warm_pool,
                unsafe_local_shell=options.unsafe_local_shell,
            )
        )
        try:
            ready = await _prepare_envs(bundle, provider, progress)
            tools_by_env, reports = await check_envs(bundle, provider, ready) if ready else ({}, {})
            check_verifiers(bundle, reports)
            reward = options.reward if options.reward is not None else bundle.manifest.serve.reward
            check_reward_rule(bundle, reward)
            if bundle.problems:
                raise BundleInvalid(root, bundle.problems)
            toolsets, toolset_of = _toolsets(bundle, tools_by_env)
        except BaseException:
            await provider.aclose()
            raise
        serve = bundle.manifest.serve
        return cls(
            bundle=bundle,
            provider=provider,
            toolsets=toolsets,
            toolset_of=toolset_of,
            verifiers=VerifierPool(bundle.verifiers, options.verifier_workers),
            metrics=Metrics(provider.status),
            starts=asyncio.Semaphore(options.concurrent_starts),
            reward=reward,
            limits=Limits(  # the operator's flag, else the bundle's [serve], else corral's default
                tool_timeout_s=options.tool_timeout_s or serve.tool_timeout_s or DEFAULT_TOOL_TIMEOUT_S,
                reset_timeout_s=options.reset_timeout_s or serve.reset_timeout_s or DEFAULT_RESET_TIMEOUT_S,
                max_turns=max((task.max_turns for task in bundle.tasks.values()), default=1),
            ),
            options=options,
            recorder=_recorder(bundle, options),
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
        """The task a reset names: by split and index, by task_id, or by seed (a task of the
        split, the same for the same seed); else the split's first. LookupError says what to
        send instead."""
        if data.index is None and data.seed is None and data.task_id is not None:
            if data.task_id not in self.bundle.tasks:
                raise LookupError(f"no task {data.task_id!r} in bundle {self.name}")
            return self.bundle.tasks[data.task_id]
        split = data.split or RESERVED_SPLIT
        if split not in self.bundle.splits:
            raise LookupError(f"no split {split!r}; the splits are: {', '.join(self.bundle.splits)}")
        tasks = self.bundle.splits[split]
        if not tasks:
            raise LookupError(f"split {split!r} has no tasks; the splits are: {', '.join(self.bundle.splits)}")
        index = data.index if data.index is not None else (data.seed or 0) % len(tasks)
        if index >= len(tasks):
            raise LookupError(f"split {split!r} has {len(tasks)} tasks; send an index from 0 to {len(tasks) - 1}")
        task = tasks[index]
        if data.task_id is not None and data.task_id != task.id:
            raise LookupError(
                f"task {index} of split {split!r} is {task.id!r}, not {data.task_id!r}: "
                "the server's bundle changed since the dataset was built; rebuild it"
            )
        return task

    def limits_for(self, data: ResetData, task: Task) -> tuple[Limits, list[str]]:
        """The limits an episode of `task` plays under: the operator's deadlines and the task's
        turns, lowered where its client asked (never raised); and a note for each request that
        was capped."""
        asked = {"tool_timeout_s": data.tool_timeout_s, "reset_timeout_s": data.reset_timeout_s}
        harness = self.harness_of(task)
        limits: dict[str, Any] = {**self.limits.model_dump(), "max_turns": task.max_turns}
        limits["agent_timeout_s"] = harness.timeout_s if harness is not None else None
        notes: list[str] = []
        for key, value in [*asked.items(), ("max_turns", data.max_turns)]:
            if value is None:
                continue
            if value > limits[key]:
                unit = "s" if key.endswith("_s") else " turns"
                notes.append(f"{key}={value:g} asked; the server's limit of {limits[key]:g}{unit} applies")
            limits[key] = min(value, limits[key])
        return Limits(**limits), notes

    def split_of(self, task_id: str) -> str | None:
        """The split a task belongs to, for a reset that named it by id: its eval split, else train."""
        return self._home_splits.get(task_id)

    @functools.cached_property
    def _home_splits(self) -> dict[str, str]:
        # Later entries win: train, then the eval splits from the last to the first.
        return {
            task.id: name
            for name, tasks in reversed(self.bundle.splits.items())
            if name != RESERVED_SPLIT
            for task in tasks
        }

    def offered_tools(self, task: Task) -> list[ToolSpec]:
        """The turn's tools: the env tools the task offers, then end_turn."""
        return self.toolsets[self.toolset_of[task.id]].tools

    def harness_of(self, task: Task) -> HarnessConfig | None:
        """The [harness] of `task`'s env: its episodes run an agent program (run_agent)."""
        return self.bundle.envs[task.env].config.harness

    def fork_modes(self) -> dict[str, str]:
        """How an episode of each env may be forked here ({env: mode}, from its env.toml); an env
        missing here cannot be: it declares no mode, or "copy" on a provider that cannot copy."""
        return {
            name: mode
            for name, env in self.bundle.envs.items()
            if (mode := env.config.fork) == "replay" or (mode == "copy" and self.provider.copies)
        }

    def all_tools(self) -> list[ToolSpec]:
        """Every tool the bundle offers, each once (what a session lists before its reset)."""
        tools = {
            tool.name: tool for toolset in self.toolsets.values() for tool in toolset.tools if tool.name != END_TURN
        }
        return [*tools.values(), END_TURN_TOOL]

    async def start_pools(self) -> None:
        """Start the provider's warm pools, where it keeps them, and the verifier workers, once
        they have imported the verifiers (on the loop that serves sessions, before it serves)."""
        self.provider.start_pools([sandbox_spec(env) for env in self.bundle.envs.values()])
        await self.verifiers.ready()

    # What its episodes ask of it (episodes.runtime.EpisodeRuntime, where each is said why).

    @property
    def max_argument_bytes(self) -> int:
        return self.options.max_argument_bytes

    @property
    def max_output_chars(self) -> int:
        return self.options.max_output_chars

    async def connect(self, task: Task, labels: Mapping[str, str]) -> EnvConnection:
        env = self.bundle.envs[task.env]
        return self.bundle.connect(env, await self.provider.start(sandbox_spec(env), labels))

    async def check_platform(self) -> None:
        await self.provider.check()

    def sandbox_kind(self) -> str:
        return self.provider.status().kind

    def python_verifiers(self, task: Task) -> dict[str, str]:
        return {score_id: name for score_id, name in task.verifiers.items() if name in self.bundle.verifiers}

    async def run_command_verifiers(self, sandbox: Sandbox, task: Task) -> dict[str, CommandScore]:
        """One after another, in the sandbox the agent used."""
        checked: dict[str, CommandScore] = {}
        for score_id, name in task.verifiers.items():
            config = self.bundle.command_verifiers.get(name)
            if config is not None:
                checked[score_id] = await run_command_verifier(sandbox, self.bundle.root, name, config, task.id)
        return checked

    async def score(
        self, task: Task, report: dict[str, Any], verifiers: Mapping[str, str], *, timeout_s: float
    ) -> dict[str, float]:
        """In a worker process of the pool: a verifier may take CPU, or never return."""
        return await self.verifiers.score(task.model_dump(), report, verifiers, timeout_s=timeout_s)

    def episode_ended(self, record: EpisodeRecord) -> None:
        """Count an ended episode, log its line, and record it when recording."""
        self.metrics.episode_ended(record)
        if self.recorder is not None:
            self.recorder.record(record, self.python_verifiers(self.bundle.tasks[record.task_id]))

    async def aclose(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        await self.verifiers.aclose()
        await self.provider.aclose()


def _recorder(bundle: LoadedBundle, options: ServeOptions) -> EpisodeRecorder | None:
    """The recorder of this run: into the folder the operator named, else the bundle's."""
    if options.record_dir is not None:
        folder = Path(options.record_dir).resolve()
    elif bundle.manifest.serve.record is not None:
        folder = bundle.root / bundle.manifest.serve.record  # the bundle's own setting: from its folder
    else:
        return None
    digests = {name: verifier_digest(path) for name, path in bundle.verifiers.items()}
    return EpisodeRecorder(folder, bundle.manifest.name, digests)


def default_instance(port: int) -> str:
    """A server's instance name: this machine's name and its port, the same after a restart,
    different for a server on another port (so concurrent servers never reap each other)."""
    return f"{socket.gethostname()}-{port}"


async def _prepare_envs(
    bundle: LoadedBundle, provider: SandboxProvider, progress: Progress = log.info
) -> list[BundleEnv]:
    """Remove what a killed run of this server left, then make every env startable (e.g. build
    its image) before any session is accepted. The envs that are ready; each other one's
    problem is added to the bundle, so all of them are listed at once."""
    await provider.reap_leftovers()
    ready = []
    for env in bundle.envs.values():
        if env.config.harness is not None and not provider.model_channels:
            bundle.problems.append(
                Problem(
                    bundle.where("envs", env.name),
                    f"env {env.name} has a [harness]: its agent's model calls leave the sandbox only by a socket "
                    f"beside the env's, which the {provider.kind} sandbox cannot give yet; serve it with "
                    "--sandbox local or --sandbox docker",
                )
            )
            continue
        try:
            prepared = await provider.prepare(sandbox_spec(env), progress)
        except SandboxError as error:  # an ImageError among them
            bundle.problems.append(Problem(bundle.where("envs", env.name), str(error)))
            continue
        if prepared.built:
            log.info("env %s: built %s in %.0fs", env.name, prepared.image, prepared.seconds)
        ready.append(env)
    return ready


def _toolsets(
    bundle: LoadedBundle, tools_by_env: dict[str, list[ToolSpec]]
) -> tuple[dict[str, Toolset], dict[str, str]]:
    """Group tasks by the tools they offer (the same names and schemas: one toolset). A toolset
    is named after its env when its tasks play one env that offers no other, else after the env
    and its tools (`mail:read+send`); one offered by tasks of several envs (a Harbor bundle's,
    an env per task) is named after the bundle (`bundle:tools` when there are several such)."""
    offered: dict[str, list[ToolSpec]] = {}
    groups: dict[str, list[str]] = {}  # the tools, as JSON -> the tasks offering them
    for task in bundle.tasks.values():
        by_name = {tool.name: tool for tool in tools_by_env[task.env]}
        offered[task.id] = [by_name[name] for name in (task.tools if task.tools is not None else by_name)]
        if bundle.envs[task.env].config.harness is not None:  # its agent runs in the sandbox: run_agent
            offered[task.id].append(RUN_AGENT_TOOL)
        key = json.dumps([tool.as_mcp() for tool in offered[task.id]], sort_keys=True)
        groups.setdefault(key, []).append(task.id)
    envs_of = {key: dict.fromkeys(bundle.tasks[task_id].env for task_id in ids) for key, ids in groups.items()}
    groups_of_env: dict[str, int] = {}
    for envs in envs_of.values():
        for env in envs:
            groups_of_env[env] = groups_of_env.get(env, 0) + 1
    shared = sum(len(envs) > 1 for envs in envs_of.values())
    toolsets: dict[str, Toolset] = {}
    toolset_of: dict[str, str] = {}
    for key, ids in groups.items():
        env_names, tools = list(envs_of[key]), offered[ids[0]]
        names = "+".join(tool.name for tool in tools)
        if len(env_names) > 1:
            env, name = bundle.manifest.name, bundle.manifest.name if shared == 1 else f"{bundle.manifest.name}:{names}"
        else:
            env = env_names[0]
            name = env if groups_of_env[env] == 1 else f"{env}:{names}"
        toolsets[name] = Toolset(name=name, env=env, tools=[*tools, END_TURN_TOOL])
        toolset_of.update(dict.fromkeys(ids, name))
    return toolsets, toolset_of
