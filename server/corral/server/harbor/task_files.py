"""One Harbor task folder, read: task.toml as Harbor 0.26's models define it (the part corral
acts on), instruction.md, environment/, tests/, solution/.

    task.toml             [agent] timeout_sec, user; [verifier] timeout_sec, env, user;
                          [environment] docker_image, cpus, memory_mb, workdir, env, network_mode
                          (or the older allow_internet) ...; [metadata]
    instruction.md        the prompt (leading canary lines dropped, as Harbor drops them)
    environment/          a Dockerfile and its build context (or docker-compose.yaml: refused)
    tests/test.sh         copied to /tests after the agent's turn; writes /logs/verifier/reward.*
    solution/solve.sh     the oracle's, never the agent's

Keys corral does not act on are ignored, as Harbor ignores keys it does not know. What would
make a task play differently from Harbor (a GPU, several steps, a verifier container of its
own, values read from the host's environment...) is named by `unsupported`, and the task is
left out of the bundle with that reason.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from corral.sandboxes import starts_code

DEFAULT_VERIFIER_TIMEOUT_S = 600.0  # Harbor's
_CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_HOST_VARIABLE = re.compile(r"\$\{[A-Za-z_]\w*(:-[^}]*)?\}")


class NetworkMode(str, Enum):
    NO_NETWORK = "no-network"
    PUBLIC = "public"
    ALLOWLIST = "allowlist"


class _Phase(BaseModel):
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class AgentConfig(_Phase):
    timeout_sec: float | None = Field(default=None, gt=0)
    user: str | int | None = None


class VerifierConfig(_Phase):
    timeout_sec: float = Field(default=DEFAULT_VERIFIER_TIMEOUT_S, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment_mode: str | None = None
    environment: dict[str, Any] | None = None
    collect: list[Any] = Field(default_factory=list)


class EnvironmentConfig(_Phase):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: str = "linux"
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    storage_mb: int | None = None
    gpus: int | None = None
    tpu: dict[str, Any] | None = None
    mcp_servers: list[Any] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    healthcheck: dict[str, Any] | None = None
    workdir: str | None = None
    allow_internet: bool | None = None  # older tasks; network_mode wins when both are set

    @model_validator(mode="before")
    @classmethod
    def _older_memory(cls, data: Any) -> Any:
        """`memory = "2G"` (older tasks) as memory_mb, as Harbor migrates it."""
        if isinstance(data, dict) and isinstance(data.get("memory"), str) and "memory_mb" not in data:
            data = {**data, "memory_mb": _size_mb(data["memory"])}
        return data


class TaskConfig(BaseModel):
    """task.toml: the part of Harbor's `TaskConfig` corral reads; other keys are ignored."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: dict[str, Any] = Field(default_factory=dict)
    steps: list[Any] | None = None

    @property
    def network_mode(self) -> NetworkMode:
        """The network the task runs with by Harbor's rules: network_mode, else allow_internet,
        else public (Harbor's default)."""
        environment = self.environment
        if environment.network_mode is not None:
            return environment.network_mode
        if environment.allow_internet is not None:
            return NetworkMode.PUBLIC if environment.allow_internet else NetworkMode.NO_NETWORK
        return NetworkMode.PUBLIC

    def asks_for_network(self) -> str | None:
        """What the task says that asks for a network, if it says so itself (Harbor's default
        of public is not counted: most tasks never chose it)."""
        for where, phase in (("environment", self.environment), ("agent", self.agent), ("verifier", self.verifier)):
            if phase.network_mode in (NetworkMode.PUBLIC, NetworkMode.ALLOWLIST):
                hosts = f" ({', '.join(phase.allowed_hosts or [])})" if phase.allowed_hosts else ""
                return f"[{where}] network_mode = {phase.network_mode.value!r}{hosts}"
        if self.environment.allow_internet:
            return "[environment] allow_internet = true"
        return None

    def unsupported(self) -> list[str]:
        """Why corral cannot play the task as Harbor would; empty when it can."""
        found = []
        environment, verifier = self.environment, self.verifier
        if self.steps:
            found.append(f"it has {len(self.steps)} steps ([[steps]]); corral plays single-step tasks")
        if environment.os.lower() != "linux":
            found.append(f"it runs on {environment.os} ([environment] os); corral runs Linux containers")
        if environment.gpus or environment.tpu:
            found.append("it asks for a GPU or TPU ([environment] gpus/tpu), which corral's sandboxes do not give")
        if environment.mcp_servers:
            found.append("it offers the agent MCP servers ([environment] mcp_servers); corral offers its own tools")
        if verifier.environment is not None or verifier.environment_mode == "separate" or verifier.collect:
            found.append(
                "its verifier has an environment of its own or collect hooks ([verifier]); corral runs "
                "test.sh in a copy of the agent's container"
            )
        for table, values in (
            ("environment", environment.env),
            ("verifier", verifier.env),
            ("solution", self.solution.get("env") or {}),
        ):
            templated = sorted(key for key, value in values.items() if _HOST_VARIABLE.search(str(value)))
            if templated:
                found.append(
                    f"[{table}] env reads {', '.join(templated)} from the host's environment, which corral "
                    "never passes into a sandbox"
                )
        return found


@dataclass(frozen=True)
class HarborTask:
    """One task folder, read (an older Terminal-Bench folder already migrated: `migrated_from`)."""

    id: str
    folder: Path
    config: TaskConfig
    instruction: str
    migrated_from: Path | None = None

    @property
    def environment_dir(self) -> Path:
        return self.folder / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.folder / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.folder / "solution"

    @property
    def has_solution(self) -> bool:
        return (self.solution_dir / "solve.sh").is_file()

    @property
    def agent_may_be_root(self) -> bool:
        """Whether the agent may run as root, as far as task.toml and the Dockerfile say: no
        `[agent] user` other than root, and no last `USER` other than root in the Dockerfile.
        A root agent can replace the programs its tests run (python3, bash, a library)."""
        return self._user_of(self.config.agent.user) in ("root", "0")

    @property
    def tests_run_as_the_agent(self) -> bool:
        """Whether test.sh runs as the agent's own user (not root), as far as task.toml and
        the Dockerfile say. Then configuration the agent leaves that a program of the tests
        honours (a repository's .git/config whose core.fsmonitor names a script, run by
        `git status`) runs the agent's code as the tests, which may write the reward files."""
        agent = self._user_of(self.config.agent.user)
        return agent not in ("root", "0") and self._user_of(self.config.verifier.user) == agent

    @property
    def image_startup_variables(self) -> list[str]:
        """The variables the Dockerfile's `ENV` sets that make a program load or run code as it
        starts (BASH_ENV, LD_PRELOAD, PYTEST_ADDOPTS: pristine.STARTUP), and `[verifier] env`
        does not: the tests get them empty (docker.whole_image.search_path), so a task needing one sets it there."""
        dockerfile = self.environment_dir / "Dockerfile"
        lines = dockerfile.read_text(errors="replace").splitlines() if dockerfile.is_file() else []
        names = []
        for line in lines:
            words = line.split()
            if len(words) < 2 or words[0].upper() != "ENV":
                continue
            # `ENV KEY=value ...`, or the older `ENV KEY value`
            assigned = [word.partition("=")[0] for word in words[1:] if "=" in word] or [words[1]]
            names += [name for name in assigned if starts_code(name) and name not in self.config.verifier.env]
        return sorted(set(names))

    def _user_of(self, configured: str | int | None) -> str:
        """The user a phase runs as: `configured` in task.toml, else the Dockerfile's last
        `USER`, else root; the name or uid, without a group."""
        if configured not in (None, ""):
            return str(configured).split(":")[0]
        dockerfile = self.environment_dir / "Dockerfile"
        lines = dockerfile.read_text(errors="replace").splitlines() if dockerfile.is_file() else []
        users = [
            line.split()[1] for line in lines if line.strip().upper().startswith("USER ") and len(line.split()) > 1
        ]
        return users[-1].split(":")[0] if users else "root"

    @property
    def compose_file(self) -> Path | None:
        for name in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml"):
            if (self.environment_dir / name).is_file():
                return self.environment_dir / name
        return None


class TaskFileError(Exception):
    """A task folder that cannot be read; the message names the file and the fix."""


def read_task(folder: Path, task_id: str | None = None) -> HarborTask:
    """The task in `folder` (task.toml, instruction.md); raise TaskFileError saying what is wrong."""
    config_path = folder / "task.toml"
    try:
        config = TaskConfig.model_validate(tomllib.loads(config_path.read_text()))
    except tomllib.TOMLDecodeError as error:
        raise TaskFileError(f"task.toml is not valid TOML: {error}; fix the syntax") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TaskFileError(f"task.toml: {where!r}: {first['msg']} (got {first.get('input')!r})") from None
    instruction_path = folder / "instruction.md"
    if not instruction_path.is_file():
        raise TaskFileError("instruction.md is missing; write the task's instruction there (it is the prompt)")
    instruction = strip_canary(instruction_path.read_text())
    if not instruction.strip():
        raise TaskFileError("instruction.md is empty; write the task's instruction there (it is the prompt)")
    return HarborTask(id=task_id or folder.name, folder=folder, config=config, instruction=instruction)


def strip_canary(text: str) -> str:
    """`text` without its leading canary lines and the blank lines after them (as Harbor does:
    they mark a benchmark's files, and an agent must not see them)."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and _CANARY_LINE.match(lines[start].strip()):
        start += 1
    while start < len(lines) and not lines[start].strip():
        start += 1
    return "\n".join(lines[start:])


def _size_mb(size: str) -> int:
    size = size.strip().upper()
    scale = {"G": 1024, "M": 1, "K": 1 / 1024}
    if size[-1:] in scale:
        return int(float(size[:-1]) * scale[size[-1]])
    raise ValueError(f"a size like '2G' or '512M', not {size!r}")
