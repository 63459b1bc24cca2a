"""Environment classes for TRL, generated from the tools a server offers.

TRL's `GRPOTrainer(environment_factory=...)` builds one instance per rollout, calls
`reset(**row)`, exposes every public method as a tool (rendered from its signature and
Google-style docstring, as transformers' `get_json_schema` reads them), and reads
`get_reward()` once the rollout ends. Each generated method carries the tool's JSON Schema
back as type hints and an `Args:` docstring, so the model sees the tool as the env wrote it.

In Jupyter an environment shows its episode's transcript, and a tool's answer shows itself
(`corral.client.display`); only `_`-prefixed methods carry that, so TRL's tools stay the tools.

The classes pickle by value (AsyncGRPO builds environments in a spawned process): their
metaclass reduces to `(environment_class, (spec,))`, and the spec is plain data.
"""

from __future__ import annotations

import copyreg
import inspect
import keyword
import logging
import weakref
from dataclasses import dataclass
from types import GenericAlias
from typing import Any, Literal, Optional, Union, cast

from corral.client.display import ToolAnswer, episode_doc
from corral.client.doc import Displayed, Doc
from corral.client.environment_records import record_episode
from corral.client.episode import Episode
from corral.client.rollout_place import next_place
from corral.client.session import Session
from corral.errors import NoEpisode, ToolSchemaError, ToolsetMismatch
from corral.protocol.catalog import ENVIRONMENT_METHODS, Toolset, ToolSpec
from corral.protocol.frames import Limits, ResetData
from corral.protocol.records import TrainingContext
from corral.protocol.rewards import RewardRule

log = logging.getLogger("corral.client")

_UNSET: Any = type("Unset", (), {"__repr__": lambda self: "<unset>"})()
_LIVE: weakref.WeakSet[CorralEnvironment] = weakref.WeakSet()


@dataclass(frozen=True, kw_only=True)
class EnvironmentSpec:
    """Everything an environment class is built from: plain data, so it pickles.

    `tool_timeout_s` and `reset_timeout_s` are limits the client asks for (None: the server's,
    which it may only lower); `server_limits` are the server's own, read from its /metadata.
    The keepalive and the wait for capacity have no defaults here: Bundle's are the ones.
    With `record_dir`, each episode is recorded there under `run` (`environment_records`)."""

    toolset: Toolset
    url: str
    server_limits: Limits
    token: str | None = None
    tool_timeout_s: float | None = None
    reset_timeout_s: float | None = None
    reward: RewardRule = None
    keepalive_s: float
    capacity_wait_s: float
    record_dir: str | None = None
    run: str = ""
    llm_url: str | None = None  # the trainer's engine, answering harness agents' calls (relay)
    llm_model: str | None = None


RESET_KEYS = ("split", "index", "task_id")  # a dataset row's: which task
ENGINE_KEYS = ("llm_url", "model", "temperature")  # a harness task's engine, for run_agent


class CorralEnvironment(Displayed):
    """One environment: a session on the server, one episode at a time."""

    _corral_spec: EnvironmentSpec

    def __init__(self) -> None:
        spec = self._corral_spec
        self._session = Session(
            spec.url, token=spec.token, keepalive_s=spec.keepalive_s, llm_url=spec.llm_url, llm_model=spec.llm_model
        )
        self._episode: Episode | None = None
        self._split: str | None = None
        self._place = TrainingContext()  # where the episode sits in an AsyncGRPO run, if it does
        self._recorded = False
        _LIVE.add(self)
        # An environment dropped without closing still frees its server session and sandbox.
        weakref.finalize(self, self._session.close_in_background)

    def reset(self, **row: Any) -> str | None:
        """Start the row's task as a new episode (the previous one, if any, is abandoned). A
        harness task's engine may be named too: `llm_url`, `model`, `temperature` (run_agent)."""
        spec = self._corral_spec
        data = ResetData(
            **{key: row[key] for key in (*RESET_KEYS, *ENGINE_KEYS) if key in row},
            tool_timeout_s=spec.tool_timeout_s,
            reset_timeout_s=spec.reset_timeout_s,
        )
        self._episode = Episode(
            self._session, spec.server_limits, reward=spec.reward, capacity_wait_s=spec.capacity_wait_s
        )
        self._split, self._place, self._recorded = row.get("split"), next_place(), False
        opened = self._episode.start(data)
        offered = [tool.name for tool in opened.offered_tools]
        expected = [tool.name for tool in spec.toolset.tools]
        if not opened.done and offered != expected:
            raise ToolsetMismatch(
                f"task {opened.task_id} offers the tools {offered}, but this environment class "
                f"({spec.toolset.name}) was built for {expected}: the model was shown the class's tools. "
                "The bundle's toolsets do not separate these tasks; give them their own toolset."
            )
        return None

    def get_reward(self) -> float | None:
        """The episode's reward: the verifiers', the task's failure score when the agent made
        it fail (logged with why), or None (logged with why) when the platform failed, which
        TRL leaves out of the update.

        A turn the model left open is ended with an empty reply first.
        """
        if self._episode is None:
            raise NoEpisode("get_reward was called before an episode started: call reset(**row) first")
        episode = self._episode
        episode.finish()
        if episode.reward is None:
            log.warning("rollout left unscored: %s", episode.reason)
        elif episode.status == "failed":
            log.info("rollout failed by the agent, scored %s: %s", episode.reward, episode.reason)
        spec = self._corral_spec
        if spec.record_dir is not None and not self._recorded:
            self._recorded = True
            record_episode(spec.record_dir, spec.run, spec.toolset.name, episode, self._split, self._place)
        return episode.reward

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._episode is None:
            raise NoEpisode(f"{name} was called before an episode started: call reset(**row) first")
        return ToolAnswer(self._episode.call(name, arguments))

    def _close(self) -> None:
        self._session.close()

    def _doc(self) -> Doc:
        return (
            episode_doc(self._episode)
            if self._episode is not None
            else Doc().add("title", f"{self._corral_spec.toolset.name}: no episode yet; call reset(**row) to start one")
        )

    def __repr__(self) -> str:  # a terminal's REPL shows the transcript, as Jupyter shows its HTML
        return self._doc().text()

    __str__ = __repr__


class _EnvironmentType(type):
    """The metaclass of generated classes; registered with copyreg so they pickle by value."""


def environment_class(spec: EnvironmentSpec) -> type[CorralEnvironment]:
    """The environment class for one toolset: its tools as methods, plus reset and get_reward."""
    namespace: dict[str, Any] = {"_corral_spec": spec, "__module__": __name__}
    for tool in spec.toolset.tools:
        name = tool.name
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name in ENVIRONMENT_METHODS:
            raise ToolSchemaError(
                f"tool {name!r} of toolset {spec.toolset.name} cannot be a method of the environment "
                f"class (TRL calls tools as public methods, and reset and get_reward are taken): rename "
                f"it in the env to a Python identifier that does not start with '_', other than "
                f"{' or '.join(sorted(ENVIRONMENT_METHODS))}"
            )
        namespace[tool.name] = _tool_method(tool)
    # A class the metaclass builds on CorralEnvironment: a subclass of it, which mypy cannot see.
    cls = cast(type[CorralEnvironment], _EnvironmentType(spec.toolset.name, (CorralEnvironment,), namespace))
    cls.__qualname__ = spec.toolset.name
    return cls


def _reduce_class(cls: _EnvironmentType) -> Any:
    """A generated class rebuilds from its spec; a user's subclass of one pickles by reference,
    as any class does (rebuilding it from the spec would drop what the subclass adds)."""
    if "_corral_spec" in vars(cls):
        return environment_class, (vars(cls)["_corral_spec"],)
    return cls.__qualname__


copyreg.pickle(_EnvironmentType, _reduce_class)


def close_environments(url: str | None = None) -> None:
    """Close the sessions of every live environment (of the server at `url`, if given)."""
    for environment in list(_LIVE):
        if url is None or environment._corral_spec.url == url:
            environment._close()


def _tool_method(tool: ToolSpec):
    schema = tool.input_schema
    properties: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    # Required parameters first, so a positional call fills them in the schema's order.
    order = sorted(properties, key=lambda n: n not in required)

    def call(self: CorralEnvironment, *positional: Any, **arguments: Any) -> str:
        if len(positional) > len(order):
            raise TypeError(
                f"{tool.name} takes at most {len(order)} arguments ({', '.join(order)}); got {len(positional)}"
            )
        for name, value in zip(order, positional, strict=False):
            if name in arguments:
                raise TypeError(f"{tool.name} got {name!r} twice: by position and by name")
            arguments[name] = value
        # Arguments beyond the schema go through: the env's refusal is what the model should read.
        return self._call(tool.name, {k: v for k, v in arguments.items() if v is not _UNSET})

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for name in order:
        annotations[name] = python_type(properties[name])
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=annotations[name],
                default=inspect.Parameter.empty if name in required else _UNSET,
            )
        )
    annotations["return"] = str
    call.__name__ = call.__qualname__ = tool.name
    call.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    call.__doc__ = _docstring(tool.description, properties)
    return call


def _docstring(description: str, properties: dict[str, Any]) -> str:
    lines = [description.strip() or "(no description)"]
    if properties:
        lines += ["", "Args:"]
        lines += [f"    {name}: {prop.get('description', name)}" for name, prop in properties.items()]
    return "\n".join(lines) + "\n"


_JSON_TYPES: dict[str, Any] = {
    "integer": int,
    "number": float,
    "string": str,
    "boolean": bool,
    "null": type(None),
    "object": dict,
}


def python_type(schema: dict[str, Any]) -> Any:
    """The type hint that transformers' get_json_schema turns back into `schema`."""
    if "enum" in schema:
        hint: Any = Literal[tuple(schema["enum"])]
    elif "anyOf" in schema:
        hint = Union[tuple(python_type(option) for option in schema["anyOf"])]  # noqa: UP007 (built at run time)
    elif isinstance(schema.get("type"), list):
        hint = Union[tuple(python_type({**schema, "type": t}) for t in schema["type"])]  # noqa: UP007 (built at run time)
    elif schema.get("type") == "array":
        if "prefixItems" in schema:
            hint = GenericAlias(tuple, tuple(python_type(item) for item in schema["prefixItems"]))
        else:
            hint = GenericAlias(list, python_type(schema["items"])) if "items" in schema else list
    elif schema.get("type") == "object" and isinstance(schema.get("additionalProperties"), dict):
        hint = GenericAlias(dict, (str, python_type(schema["additionalProperties"])))
    else:
        hint = _JSON_TYPES.get(schema.get("type", ""), Any)
    return Optional[hint] if schema.get("nullable") else hint  # noqa: UP045 (hint may be a typing form)
