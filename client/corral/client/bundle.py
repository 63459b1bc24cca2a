"""`Bundle`: a served bundle as a Hugging Face dataset and TRL environment classes.

env = Bundle("http://env-host:8000", split="train")     # a remote server
env = Bundle(["http://a:8000", "http://b:8000"])        # many env hosts, one dataset (hosts.py)
env = Bundle.local("bundles/gridsim", split="train")    # served in this process
trainer = GRPOTrainer(..., train_dataset=env.dataset, environment_factory=env.factory)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import httpx

from corral.client.factory import (
    CorralEnvironment,
    EnvironmentSpec,
    close_environments,
    environment_class,
)
from corral.client.session import refusal
from corral.client.urls import base_urls
from corral.errors import (
    BundleMismatch,
    ServerError,
    ServerUnreachable,
    ToolsetMismatch,
    UnknownSplit,
)
from corral.protocol.catalog import SplitInfo, TaskInfo, Toolset
from corral.protocol.frames import Limits
from corral.protocol.record_store import new_run
from corral.protocol.rewards import RewardRule

HTTP_TIMEOUT_S = 60.0
TOKEN_VARIABLE = "CORRAL_TOKEN"


class Bundle:
    """The tasks of one split of a served bundle, and the environments that play them.

    Args:
        url: the corral server, e.g. `http://env-host:8000`; or several env hosts serving the
            same bundle (a list, or one string separated by commas), among which sessions are
            spread by their free capacity, a host that goes away leaving the rotation until
            it is back (docs/scale-out.md).
        split: the split whose tasks `dataset` holds: `train` (the tasks in no eval split),
            `all`, or one per eval file of the bundle.
        reward: which score is the reward (a score id), or a function of all the scores; by
            default the server's reward. A function must be importable (not a lambda) to
            pickle into AsyncGRPO's process.
        tool_timeout: seconds a tool call may take before the server ends its episode; by
            default the server's limit, which a client may lower but never raise.
        reset_timeout: likewise, for a reset (deploying the env) or an end_turn.
        token: the server's bearer token, if it asks for one (default: $CORRAL_TOKEN).
        keepalive: seconds between keepalive pings on each session's socket.
        capacity_wait: seconds a reset waits for a free session when the server is at its
            session limit, before it raises `CapacityError` (default: it raises at once).
        record_dir: record each episode the environments play there, as one run
            (`RolloutRecord`s joined by episode id to the server's records; under AsyncGRPO with
            each one's group, index in it and policy version); none by default.
        llm_url: the trainer's engine (OpenAI-compatible, e.g. vLLM at `http://gpu-box:8000`),
            serving the model `llm_model`: a harness episode's agent's model calls then come to
            the environments over their sessions (relay mode), so the env host needs no route
            to the engine (docs/protocol.md, "Relay").
    """

    def __init__(
        self,
        url: str | Sequence[str],
        split: str = "train",
        reward: RewardRule = None,
        tool_timeout: float | None = None,
        reset_timeout: float | None = None,
        token: str | None = None,
        keepalive: float = 20.0,
        capacity_wait: float = 0.0,
        record_dir: str | Path | None = None,
        llm_url: str | None = None,
        llm_model: str | None = None,
    ):
        self.urls = base_urls(url)
        self.url = ",".join(self.urls)  # what sessions are opened on: one host, or the hosts to spread over
        self._capacity_wait = capacity_wait
        self.split = split
        self._reward = reward
        self._tool_timeout = tool_timeout
        self._reset_timeout = reset_timeout
        self._token = token if token is not None else os.environ.get(TOKEN_VARIABLE) or None
        self._keepalive = keepalive
        self._record_dir = str(record_dir) if record_dir is not None else None
        self._llm_url, self._llm_model = llm_url, llm_model
        self._run = new_run()  # the environments' records, in any process, are one run
        self._server: Any = None  # the embedded server Bundle.local started, if any
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        self._clients = [
            httpx.Client(base_url=host, headers=headers, timeout=HTTP_TIMEOUT_S, trust_env=False) for host in self.urls
        ]
        self._http = self._clients[0]
        metadata = self._get("/metadata")
        self.name: str = metadata["name"]
        self.limits = Limits(
            tool_timeout_s=metadata["tool_timeout_s"],
            reset_timeout_s=metadata["reset_timeout_s"],
            max_turns=metadata.get("max_turns"),  # None from a server older than it
        )
        if len(self._clients) > 1:
            self.limits = self._check_hosts_agree()
        self.splits: dict[str, int] = {
            split.name: split.num_tasks for split in map(SplitInfo.model_validate, self._get(f"/{self.name}/splits"))
        }
        self.toolsets: dict[str, Toolset] = {
            t["name"]: Toolset.model_validate(t) for t in self._get("/toolsets")["toolsets"]
        }
        if not self._tasks(split):  # fail now, with the list of splits, if the split is of no use
            raise UnknownSplit(
                f"split {split!r} of bundle {self.name} has no tasks (its splits: {self._split_sizes()}); "
                "pick another split, or give the bundle tasks outside its eval splits (evals/train.toml)"
            )

    @classmethod
    def local(
        cls,
        path: str | Path,
        split: str = "train",
        sandbox: str = "auto",
        max_concurrent_envs: int = 8,
        reward: RewardRule = None,
        tool_timeout: float | None = None,
        reset_timeout: float | None = None,
        keepalive: float = 20.0,
        warm_pool: int = 0,
        record_dir: str | Path | None = None,
        unsafe_local_shell: bool = False,
    ) -> Bundle:
        """Serve the bundle at `path` in this process (on a free loopback port) and open it.

        `sandbox` is `auto` (docker when an engine answers, else local processes), `docker`,
        `local` or `modal` (Modal's cloud, with Modal's credentials); `warm_pool` keeps that many started sandboxes per env; `record_dir`
        records every episode there (`corral serve --record`). `reward`, `tool_timeout` and
        `reset_timeout` are the server's settings here. `unsafe_local_shell=True` lets local
        processes serve envs that give the agent a shell where bubblewrap cannot contain them
        (`corral serve --unsafe-local-shell`; docs/sandboxes.md)."""
        try:  # imported here: the server is optional for a client
            from corral.server.serving.embedded import EmbeddedServer
            from corral.server.serving.options import ServeOptions
        except ImportError as error:
            raise ImportError(
                f"Bundle.local serves the bundle in this process and needs corral's server: "
                f"pip install 'corral[server]' ({error})"
            ) from None
        options = ServeOptions(
            sandbox=sandbox,
            max_concurrent_envs=max_concurrent_envs,
            reward=reward,
            tool_timeout_s=tool_timeout,
            reset_timeout_s=reset_timeout,
            warm_pool=warm_pool,
            record_dir=Path(record_dir) if record_dir is not None else None,
            unsafe_local_shell=unsafe_local_shell,
        )
        server = EmbeddedServer(Path(path), options, ws_ping_interval=keepalive, ws_ping_timeout=keepalive)
        try:
            bundle = cls(server.url, split=split, keepalive=keepalive)
        except BaseException:
            server.stop()
            raise
        bundle._server = server
        return bundle

    @functools.cached_property
    def dataset(self):
        """The split's tasks as a `datasets.Dataset`: `prompt`, `split`, `index`, `task_id` (and
        `environment`, naming each row's class, when `factory` is a dict)."""
        return self.dataset_for(self.split)

    def dataset_for(self, split: str):
        """Another split's tasks, as rows `factory` can play."""
        from datasets import Dataset  # importing datasets is slow: only when needed

        rows = [self._row(task) for task in self._tasks(split)]
        return Dataset.from_list(rows)

    @functools.cached_property
    def factory(self) -> type[CorralEnvironment] | dict[str, type[CorralEnvironment]]:
        """The environment class TRL builds environments from; a dict of classes, one per
        toolset, when the split's tasks offer different tools."""
        classes = {name: environment_class(self.environment_spec(name)) for name in self.split_toolsets}
        return classes if len(classes) > 1 else next(iter(classes.values()))

    @property
    def served_run(self) -> str | None:
        """The run the server `local` started records its episodes under (with `record_dir`);
        None for a server elsewhere, whose records this process does not see."""
        served = self._server.served if self._server is not None else None
        return served.recorder.run if served is not None and served.recorder is not None else None

    def close(self) -> None:
        """End every episode the environments hold, and stop the server `local` started."""
        close_environments(self.url)
        for client in self._clients:
            client.close()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Bundle({self.url!r}, name={self.name!r}, split={self.split!r}, tasks={self.splits.get(self.split)})"

    @functools.cached_property
    def split_toolsets(self) -> list[str]:
        """The toolsets of the Bundle's split, in the order its tasks first use them."""
        return list(dict.fromkeys(task.toolset for task in self._tasks(self.split)))

    def _row(self, task: TaskInfo) -> dict[str, Any]:
        prompt = [{"role": "system", "content": task.system_prompt}] if task.system_prompt else []
        prompt.append({"role": "user", "content": task.prompt})
        row: dict[str, Any] = {"prompt": prompt, "split": task.split, "index": task.index, "task_id": task.task_id}
        if task.toolset not in self.split_toolsets:
            raise ToolsetMismatch(
                f"task {task.task_id} of split {task.split!r} offers toolset {task.toolset!r}, which no task "
                f"of the split {self.split!r} this Bundle was opened with does, so `factory` has no class "
                f"for it: open a Bundle on split {task.split!r}"
            )
        if len(self.split_toolsets) > 1:
            row["environment"] = task.toolset
        return row

    @functools.cache  # noqa: B019 (one Bundle lives as long as its tasks do)
    def _tasks(self, split: str) -> list[TaskInfo]:
        if split not in self.splits:
            raise UnknownSplit(f"bundle {self.name} has no split {split!r}; its splits are: {self._split_sizes()}")
        reply = self._send("POST", f"/{self.name}/tasks", json={"split": split})
        return [TaskInfo.model_validate(task) for task in reply["tasks"]]

    def _split_sizes(self) -> str:
        return ", ".join(f"{name} ({size} tasks)" for name, size in self.splits.items())

    def environment_spec(self, toolset: str) -> EnvironmentSpec:
        """What the environment class of `toolset` is built from: the server, its limits, the
        token, the reward rule (`factory` builds its classes from these)."""
        return EnvironmentSpec(
            toolset=self.toolsets[toolset],
            url=self.url,
            server_limits=self.limits,
            token=self._token,
            tool_timeout_s=self._tool_timeout,
            reset_timeout_s=self._reset_timeout,
            reward=self._reward,
            keepalive_s=self._keepalive,
            capacity_wait_s=self._capacity_wait,
            record_dir=self._record_dir,
            run=self._run,
            llm_url=self._llm_url,
            llm_model=self._llm_model,
        )

    def _check_hosts_agree(self) -> Limits:
        """Refuse hosts that serve different bundles (the dataset must fit them all); the
        limits to wait for are the longest any host allows."""

        def served(client: httpx.Client) -> tuple[dict, Any]:
            metadata = self._send("GET", "/metadata", client=client)
            name = metadata["name"]
            splits = self._send("GET", f"/{name}/splits", client=client)
            tasks = {
                split["name"]: [
                    task["task_id"]
                    for task in self._send("POST", f"/{name}/tasks", client=client, json={"split": split["name"]})[
                        "tasks"
                    ]
                ]
                for split in splits
            }
            what = {
                "names and versions": (name, metadata["version"]),
                "tasks": tasks,
                "toolsets": self._send("GET", "/toolsets", client=client)["toolsets"],
            }
            return metadata, what

        first_metadata, first = served(self._clients[0])
        limits = [first_metadata]
        for client in self._clients[1:]:
            metadata, other = served(client)
            for part in ("names and versions", "tasks", "toolsets"):
                if other[part] != first[part]:
                    raise BundleMismatch(
                        f"the env hosts {self.urls[0]} and {client.base_url} serve different bundles (their {part} "
                        f"differ: {str(first[part])[:200]} against {str(other[part])[:200]}); serve the same bundle "
                        "folder, at the same version, on every host"
                    )
            limits.append(metadata)
        return Limits(
            tool_timeout_s=max(m["tool_timeout_s"] for m in limits),
            reset_timeout_s=max(m["reset_timeout_s"] for m in limits),
            max_turns=max((m["max_turns"] for m in limits if m.get("max_turns")), default=None),
        )

    def _get(self, path: str) -> Any:
        return self._send("GET", path)

    def _send(self, method: str, path: str, client: httpx.Client | None = None, **kwargs: Any) -> Any:
        """A request to `client`'s host, or else to the first host that answers (they all serve
        the same bundle)."""
        for candidate in [client] if client is not None else self._clients:
            url = str(candidate.base_url).rstrip("/")
            try:
                reply = candidate.request(method, path, **kwargs)
            except httpx.TransportError as error:
                unreachable = ServerUnreachable(
                    f"could not reach a corral server at {url} ({error}); start one with "
                    "`corral serve BUNDLE --port PORT`, or use Bundle.local(BUNDLE)"
                )
                continue
            if reply.status_code in (401, 403):
                raise refusal(url, reply.status_code)
            if reply.is_error:
                raise ServerError(f"HTTP {reply.status_code}", f"{method} {url}{path} failed: {reply.text[:500]}")
            return reply.json()
        raise unreachable
