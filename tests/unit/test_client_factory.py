"""Environment classes for TRL, generated from a server's toolset, and the reward rule.

No server is needed: `environment_class` only builds a class (an instance connects on its
first reset). The tools here are described by the env SDK's own schema function from real
typed functions, as a served env's tools are.
"""

import dataclasses
import inspect
import multiprocessing
import pickle
from typing import Any, Literal, Optional, Union

import pytest
from transformers.utils import get_json_schema

from corral.client.factory import (
    CorralEnvironment,
    EnvironmentSpec,
    close_environments,
    environment_class,
    python_type,
)
from corral.client.session import Session
from corral.env.schema import tool_schema
from corral.errors import NoEpisode, RewardError, ToolSchemaError
from corral.protocol.catalog import END_TURN_TOOL, Toolset, ToolSpec
from corral.protocol.frames import Limits
from corral.protocol.rewards import pick_reward


def submit_schedule(actions: list[int]) -> dict:
    """Submit the day's schedule; the last submission counts.

    Args:
        actions: one integer per hour, hour 0 first.
    """


def place(row: int, col: int, note: Optional[str] = None) -> dict:  # noqa: UP045 - the spelling users write
    """Place your mark on a free square.

    Args:
        row: the row, 1 (top) to 3 (bottom).
        col: the column, 1 (left) to 3 (right).
        note: a remark to log with the move.
    """


def paint(
    grid: list[list[int]],
    colour: Literal["red", "green"],
    brush: str = "m",
    opacity: float = 1.0,
    target: Union[int, str] = 0,  # noqa: UP007
    weights: dict[str, float] | None = None,
) -> dict:
    """Paint cells of a grid.

    Args:
        grid: rows of cell ids to paint.
        colour: the paint.
        brush: the brush size (choices: ["s", "m", "l"])
        opacity: from 0 (clear) to 1 (solid).
        target: a layer number or name.
        weights: how much of each pigment to mix in.
    """


def look() -> str:
    """Describe the room."""


TOOLS = [ToolSpec.model_validate(tool_schema(fn)) for fn in (submit_schedule, place, paint, look)]
SPEC = EnvironmentSpec(
    toolset=Toolset(name="studio", env="studio", tools=[*TOOLS, END_TURN_TOOL]),
    url="http://127.0.0.1:9",
    server_limits=Limits(tool_timeout_s=60, reset_timeout_s=600),
    reward="grade",
    keepalive_s=20.0,
    capacity_wait_s=0.0,
)
Studio = environment_class(SPEC)


def tool_names(cls: type) -> list[str]:
    """The methods TRL offers as tools: public functions other than reset and get_reward."""
    return [
        name
        for name, _ in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    ]


def schema_of(cls: type, name: str) -> dict:
    """The tool as TRL renders it for the model (transformers' get_json_schema)."""
    function = get_json_schema(getattr(cls, name))["function"]
    return {"name": function["name"], "description": function["description"], "parameters": function["parameters"]}


@pytest.mark.parametrize("tool", [*TOOLS, END_TURN_TOOL], ids=lambda tool: tool.name)
def test_each_method_renders_as_the_tool_the_env_described(tool):
    assert schema_of(Studio, tool.name) == {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
    }


def test_methods_take_the_required_arguments_first_by_position_or_name():
    assert str(inspect.signature(Studio.submit_schedule)) == "(self, actions: list[int]) -> str"
    assert str(inspect.signature(Studio.look)) == "(self) -> str"
    signature = inspect.signature(Studio.place)
    assert list(signature.parameters) == ["self", "row", "col", "note"]
    assert signature.parameters["row"].default is inspect.Parameter.empty
    assert signature.parameters["note"].default is not inspect.Parameter.empty


class Recording(Studio):
    """Records what the generated methods would send, instead of sending it."""

    def _call(self, name, arguments):
        self.sent = (name, arguments)
        return "sent"


def test_positional_arguments_reach_the_server_by_name():
    studio = Recording()
    studio.place(2, 3)
    assert studio.sent == ("place", {"row": 2, "col": 3})
    studio.place(2, col=1, note="here")
    assert studio.sent == ("place", {"row": 2, "col": 1, "note": "here"})
    studio.place(row=1, col=1, stray="kept")  # the env's refusal is what the model should read
    assert studio.sent == ("place", {"row": 1, "col": 1, "stray": "kept"})
    with pytest.raises(TypeError, match="place got 'row' twice"):
        studio.place(1, row=2)
    with pytest.raises(TypeError, match="place takes at most 3 arguments"):
        studio.place(1, 2, "a", "b")


def test_a_tool_called_before_reset_says_to_reset_first():
    with pytest.raises(NoEpisode, match=r"place was called before an episode started: call reset\(\*\*row\) first"):
        Studio().place(1, 1)
    with pytest.raises(NoEpisode, match="get_reward was called before an episode started"):
        Studio().get_reward()


def test_the_class_offers_the_toolset_plus_reset_and_get_reward():
    assert sorted(tool_names(Studio)) == ["end_turn", "look", "paint", "place", "submit_schedule"]
    assert issubclass(Studio, CorralEnvironment)
    assert Studio.__name__ == "studio"


def test_the_class_pickles_by_value():
    restored = pickle.loads(pickle.dumps(Studio))

    assert restored._corral_spec == SPEC
    assert tool_names(restored) == tool_names(Studio)
    for tool in TOOLS:
        assert schema_of(restored, tool.name) == schema_of(Studio, tool.name)


def build_and_list_tools(pickled: bytes) -> list[str]:
    """In a fresh process: unpickle the class, build an environment, list its tools as TRL does."""
    environment = pickle.loads(pickled)()
    return tool_names(type(environment))


@pytest.mark.slow  # a spawned interpreter imports the client anew
def test_the_class_builds_in_a_spawned_process():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        names = pool.apply(build_and_list_tools, (pickle.dumps(Studio),))

    assert names == tool_names(Studio)


@pytest.mark.parametrize("name", ["reset", "get_reward", "class", "not-an-identifier", "_call"])
def test_a_tool_that_cannot_be_a_method_is_refused_when_the_class_is_built(name):
    tool = ToolSpec(name=name, description="A tool.", input_schema={"type": "object", "properties": {}})
    spec = dataclasses.replace(SPEC, toolset=Toolset(name="odd", env="odd", tools=[tool, END_TURN_TOOL]))

    with pytest.raises(ToolSchemaError) as refused:
        environment_class(spec)

    assert f"tool {name!r} of toolset odd cannot be a method" in str(refused.value)
    assert "rename it in the env to a Python identifier" in str(refused.value)


class ScoredStudio(Studio):
    """A trainer's own subclass: one more public method, and a reward hook of its own."""

    def get_reward(self) -> float | None:
        return 0.25

    def hint(self) -> str:
        """Say what to try next."""
        return "try paint"


def test_a_subclass_keeps_the_tools_and_adds_its_own():
    environment = ScoredStudio()

    assert environment.get_reward() == 0.25
    assert sorted(tool_names(ScoredStudio)) == sorted([*tool_names(Studio), "hint"])
    assert schema_of(ScoredStudio, "place") == schema_of(Studio, "place")
    assert ScoredStudio._corral_spec == SPEC


def test_a_subclass_pickles_as_itself():
    assert pickle.loads(pickle.dumps(ScoredStudio)) is ScoredStudio


SCORES = {"grade": 0.5, "format": 1.0}


def test_pick_reward_by_score_id():
    assert pick_reward(SCORES, "format") == 1.0


def test_pick_reward_by_a_function_of_the_scores():
    assert pick_reward(SCORES, lambda s: sum(s.values()) / len(s)) == 0.75


@pytest.mark.parametrize("rule", [lambda s: s["a"] + s["b"], lambda s: s["a"] * 10 - s["b"] * 10], ids=["inf", "nan"])
def test_pick_reward_refuses_a_function_that_makes_no_finite_number_of_finite_scores(rule):
    with pytest.raises(RewardError, match="must be a finite number"):
        pick_reward({"a": 1e308, "b": 1e308}, rule)


def test_pick_reward_takes_the_only_score_without_a_rule():
    assert pick_reward({"grade": 0.5}, None) == 0.5


def test_pick_reward_refuses_an_unknown_score_id():
    with pytest.raises(RewardError) as refused:
        pick_reward(SCORES, "style")

    assert str(refused.value) == "reward='style' names no score of this episode; it has: format, grade"


def test_pick_reward_asks_for_a_rule_when_there_are_several_scores():
    with pytest.raises(RewardError) as refused:
        pick_reward(SCORES, None)

    assert "records 2 scores (format, grade) and no reward was chosen" in str(refused.value)
    assert "pick one with reward='format' (corral serve --reward format)" in str(refused.value)
    assert "reward=lambda s: sum(s.values()) / len(s)" in str(refused.value)


def test_closing_the_environments_of_one_server_leaves_the_others_open(monkeypatch):
    closed: list[str] = []
    monkeypatch.setattr(Session, "close", lambda session: closed.append(session.url))
    Elsewhere = environment_class(dataclasses.replace(SPEC, url="http://127.0.0.1:10"))
    here, there = Studio(), Elsewhere()
    close_environments("http://127.0.0.1:9")
    assert closed.count("http://127.0.0.1:9") >= 1 and "http://127.0.0.1:10" not in closed
    close_environments()
    assert "http://127.0.0.1:10" in closed
    del here, there


@pytest.mark.parametrize(
    ("schema", "hint"),
    [
        ({"type": "array"}, list),
        ({"type": "array", "items": {"type": "integer"}}, list[int]),
        ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}, tuple[int, str]),
        ({"type": "object"}, dict),
        ({"type": "object", "additionalProperties": {"type": "number"}}, dict[str, float]),
        ({"type": "object", "additionalProperties": True}, dict),
        ({"type": ["integer", "null"]}, Optional[int]),  # noqa: UP045
        ({"type": "string", "nullable": True}, Optional[str]),  # noqa: UP045
        ({"enum": ["s", "m"]}, Literal["s", "m"]),
        ({}, Any),
    ],
)
def test_each_json_schema_type_becomes_the_hint_transformers_reads_back(schema, hint):
    assert python_type(schema) == hint
