"""The bundle format's files as models: bundle.toml, env.toml, a task, a command verifier and an
eval file (docs/bundle-format.md describes each field). `corral.server.bundles.folder` reads a bundle's
folder into them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corral.sandboxes import NetworkPolicy
from corral.server.harness.agents import KNOWN_AGENTS, PLACEHOLDERS, unknown_placeholders

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServeDefaults(_Strict):
    tool_timeout_s: float | None = Field(default=None, gt=0)
    reset_timeout_s: float | None = Field(default=None, gt=0)
    reward: str | None = None
    record: str | None = None  # a folder (relative to the bundle's) to record every episode in


class Manifest(_Strict):
    """bundle.toml."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    version: str = "0.0.0"
    defaults: dict[str, Any] = Field(default_factory=dict)
    serve: ServeDefaults = Field(default_factory=ServeDefaults)


class ResourcesConfig(_Strict):
    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int = Field(default=512, ge=16)
    pids: int = Field(default=256, ge=8)


class HarnessConfig(_Strict):
    """[harness] in env.toml: the agent program an episode of this env runs in its sandbox
    (the `run_agent` tool), its model calls captured by corral's proxy."""

    agent: str  # a name in corral.server.harness.agents.KNOWN_AGENTS: how it is pointed at a model
    command: list[str] | None = Field(default=None, min_length=1)  # None: the agent's usual one
    environment: dict[str, str] = Field(default_factory=dict)  # more variables, templates too
    step_limit: int = Field(default=30, ge=1)  # model calls answered; later ones get a stop message
    timeout_s: float = Field(default=600.0, gt=0)  # the agent's wall-clock time, then it is killed
    max_tokens: int = Field(default=4096, ge=1)  # a call's output cap, whatever the agent asks

    @model_validator(mode="after")
    def _known(self) -> HarnessConfig:
        known = KNOWN_AGENTS.get(self.agent)
        if known is None:
            raise ValueError(f"agent {self.agent!r} is not one corral knows; use one of {sorted(KNOWN_AGENTS)}")
        if self.command is None and not known.command:
            raise ValueError(f"agent {self.agent!r} has no usual command line; give command = [...] ({known.notes})")
        unknown = unknown_placeholders([*(self.command or ()), *self.environment.values()])
        if unknown:
            raise ValueError(
                f"unknown placeholders {sorted(unknown)} in command or environment; use {sorted(PLACEHOLDERS)}"
            )
        return self

    def agent_command(self) -> list[str]:
        """The command to run, before its placeholders are filled."""
        return list(self.command or KNOWN_AGENTS[self.agent].command)


class EnvConfig(_Strict):
    """envs/<name>/env.toml."""

    entry: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    command: list[str] | None = Field(default=None, min_length=1)
    dockerfile: str = "Dockerfile"
    image: str | None = None
    network: NetworkPolicy = "none"
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    # docker sandbox: the root filesystem is read-only; /tmp and each `writable` folder (e.g.
    # where the agent edits a repository) is a writable tmpfs of scratch_mb (docs/sandboxes.md)
    writable: list[Annotated[str, Field(pattern=r"^/.+$")]] = Field(default_factory=list)
    scratch_mb: int = Field(default=64, ge=1)
    # Whether a tool runs what the agent writes, or reads and writes files it names (a shell,
    # an editor). corral cannot tell what a tool does, so it assumes so unless told otherwise;
    # where the local sandbox cannot contain such an env, it refuses to serve it (docs/sandboxes.md).
    agent_shell: bool = True
    # How an episode of this env may be forked (corral/episode/fork); None: it cannot be.
    # "replay": the env's state lives in its process's memory and follows from its task and the
    # calls made, so a copy is a fresh env given the same task and the episode's calls again.
    # "copy": its state lives in its writable folders, so a copy is a fresh sandbox holding a
    # copy of them, its fresh env resumed on them (Env.resume), nothing replayed.
    fork: Literal["replay", "copy"] | None = None
    # A harness env: its episodes run an agent program in the sandbox (HarnessConfig).
    harness: HarnessConfig | None = None


class Task(_Strict):
    """One task: which env it plays, what reset gets, what the agent is told and offered."""

    id: str = Field(pattern=NAME_PATTERN)
    env: str
    args: dict[str, Any] = Field(default_factory=dict)
    system_prompt: str = ""
    prompt: str
    tools: list[str] | None = None
    verifiers: dict[str, str] = Field(min_length=1)
    max_turns: int = Field(default=1, ge=1)
    # The agent's wall-clock time from the reset; when it is spent, the turn ends and what the
    # agent left is scored. None: no budget, only the deadlines of each call.
    time_budget_s: float | None = Field(default=None, gt=0)
    # What an episode the agent made fail scores (a tool past its deadline, its env killed...).
    failure_score: float = 0.0


class CommandVerifier(_Strict):
    """verifiers/<name>.toml: a command run inside the episode's sandbox after the agent's last
    turn; the score is 1.0 when it exits 0, else 0.0 (a timeout included)."""

    command: list[str] = Field(min_length=1)
    files: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=60.0, gt=0)

    @field_validator("files", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def files_for(self, task_id: str) -> list[str]:
        """The bundle paths (files or folders) copied in for `task_id`."""
        return [entry.replace("{task_id}", task_id) for entry in self.files]

    def command_for(self, task_id: str, files_dir: str) -> list[str]:
        """The command with its placeholders filled in."""
        return [part.replace("{files}", files_dir).replace("{task_id}", task_id) for part in self.command]

    def placement(self) -> dict[str, Any]:
        """What `Sandbox.verify` is told beyond the files and the command: nothing, for
        verifiers/*.toml (the provider's own folder, the env's user)."""
        return {}


class RewardFileVerifier(CommandVerifier):
    """A Harbor task's tests (corral.server.harbor makes one per task; never read from
    verifiers/*.toml): its files go to `files_dir` (/tests), it runs as `user` ("": the image's
    USER) with `environment`, and its scores are the reward file it writes in `reward_dir`,
    read from outside it: reward.json (a dict of finite numbers, one score per key, as named
    there) or reward.txt (one number, the score `reward`)."""

    files_dir: str = "/tests"
    reward_dir: str = "/logs/verifier"
    user: str = ""
    environment: dict[str, str] = Field(default_factory=dict)

    def placement(self) -> dict[str, Any]:
        return {
            "files_dir": self.files_dir,
            "results": self.reward_files,
            "user": self.user,
            "environment": self.environment,
        }

    @property
    def reward_files(self) -> tuple[str, str]:
        return f"{self.reward_dir}/reward.json", f"{self.reward_dir}/reward.txt"


class EvalConfig(_Strict):
    """evals/<split>.toml."""

    description: str = ""
    tasks: list[str] = Field(min_length=1)
