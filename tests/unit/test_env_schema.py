"""Tool schemas of the env SDK: the same as transformers' `get_json_schema`, and clear errors."""

import enum
import os
import sys
from pathlib import Path
from typing import Any, Literal, Optional, Union

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "sandboxes"))

import corral.errors
from corral.env import Env, ToolSchemaError, tool
from corral.env import schema as schema_module
from corral.env.schema import tool_schema


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


def scalars(hours: int, price: float, day: str, dry_run: bool):
    """Plan one day.

    Args:
        hours: how many hours to plan
        price: the price cap, in USD/MWh
        day: the day, as YYYY-MM-DD
        dry_run: check the plan without applying it
    """


def containers(actions: list[int], meta: dict, weights: dict[str, float], pair: tuple[int, str]):
    """Submit a schedule with its metadata.

    A second paragraph of the description.

    Args:
        actions: one integer per hour: +1 charge, -1 discharge, 0 idle.
            This line continues the description.
        meta: free-form notes
        weights: a weight per asset
        pair: an hour and a label

    Returns:
        Nothing useful.
    """


# typing's Optional and Union on purpose, beside `X | None`: each spelling must give the schema.
def optional_and_defaults(
    note: Optional[str] = None,  # noqa: UP045
    limit: int | None = None,
    tags: list[str] | None = None,
    n: int = 3,
):
    """Look things up.

    Args:
        note: an optional note
        limit: the most results
        tags: tags to filter by
        n: how many
    """


def enums(mode: Literal["fast", "slow"], level: Literal[1, 2, "max"], color: Color, unit: str):
    """Pick the options.

    Args:
        mode: how to run
        level: how hard
        color: which color
        unit: the unit (choices: ["kW", "MW"])
    """


def unions(
    value: Union[int, str],  # noqa: UP007
    anything: Any,
    mixed: Union[list[int], str, None],  # noqa: UP007
):
    """Take several kinds.

    Args:
        value: a number or a name
        anything: any value at all
        mixed: a list of numbers or a name
    """


class Grid:
    def submit(self, actions: list[int], when: str = "now") -> dict:
        """Submit as a method.

        Args:
            actions: the actions
            when: when to apply them
        """


REPRESENTATIVE = [scalars, containers, optional_and_defaults, enums, unions, Grid.submit]


@pytest.mark.parametrize("fn", REPRESENTATIVE, ids=lambda fn: fn.__name__)
def test_schema_matches_transformers_get_json_schema(fn):
    if os.environ.get("CI") != "true":  # CI installs transformers: there, its absence fails the test
        pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    expected = get_json_schema(fn)["function"]

    ours = tool_schema(fn)

    assert ours["name"] == expected["name"]
    assert ours["description"] == expected["description"]
    assert ours["inputSchema"] == expected["parameters"]


def test_schema_has_mcp_shape_with_types_choices_and_required():
    schema = tool_schema(enums)

    assert set(schema) == {"name", "description", "inputSchema"}
    assert schema["inputSchema"]["type"] == "object"
    assert schema["inputSchema"]["required"] == ["mode", "level", "color", "unit"]
    properties = schema["inputSchema"]["properties"]
    assert properties["unit"] == {"type": "string", "enum": ["kW", "MW"], "description": "the unit"}
    assert properties["level"]["type"] == ["integer", "string"]
    assert properties["color"]["enum"] == ["red", "green"]


def test_self_is_skipped_and_defaults_are_not_required():
    schema = tool_schema(Grid.submit)

    assert list(schema["inputSchema"]["properties"]) == ["actions", "when"]
    assert schema["inputSchema"]["required"] == ["actions"]


def test_tool_schemas_lists_tools_in_definition_order_with_base_tools_first():
    class Base(Env):
        @tool
        def look(self) -> str:
            """Look around."""

    class Child(Base):
        @tool
        def move(self, steps: int) -> str:
            """Move.

            Args:
                steps: how far
            """

        def helper(self) -> None:
            """Not a tool."""

    names = [t["name"] for t in Child.tool_schemas()]

    assert names == ["look", "move"]
    assert Env.tool_schemas() == []


def test_env_defaults_end_the_episode_and_report_nothing():
    env = Env()
    env.reset({"day": 1})

    assert env.end_turn("done") is None
    assert env.report() == {}


def _no_docstring(self, actions: list[int]): ...


def _undescribed(self, actions: list[int], day: str):
    """Submit.

    Args:
        day: the day
    """


def _no_hint(self, actions):
    """Submit.

    Args:
        actions: the actions
    """


def _star_args(self, *actions: int):
    """Submit.

    Args:
        actions: the actions
    """


def _star_kwargs(self, **options: int):
    """Submit.

    Args:
        options: the options
    """


def _positional_only(self, actions: list[int], /):
    """Submit.

    Args:
        actions: the actions
    """


def _custom_class(self, actions: Grid):
    """Submit.

    Args:
        actions: the actions
    """


def _one_tuple(self, actions: tuple[int]):
    """Submit.

    Args:
        actions: the actions
    """


def _bad_choices(self, actions: str):
    """Submit.

    Args:
        actions: the actions (choices: kW or MW)
    """


def _unresolved(self, actions: "Missing"):  # noqa: F821
    """Submit.

    Args:
        actions: the actions
    """


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (_no_docstring, ["no docstring", "Args:"]),
        (_undescribed, ["'actions' is not described", "'    actions: what it is'"]),
        (_no_hint, ["'actions' has no type hint", "'actions: str'"]),
        (_star_args, ["'*actions'", "list"]),
        (_star_kwargs, ["'**options'", "named parameters"]),
        (_positional_only, ["'actions' is positional-only", "'/'"]),
        (_custom_class, ["'actions'", "Grid", "no JSON schema"]),
        (_one_tuple, ["'actions'", "tuple[int]", "a list"]),
        (_bad_choices, ["'actions'", "not a JSON list", '(choices: ["a", "b"])']),
        (_unresolved, ["cannot be resolved", "Missing"]),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_a_tool_that_cannot_be_described_raises_an_error_naming_tool_and_fix(fn, words):
    with pytest.raises(ToolSchemaError) as caught:
        tool_schema(fn)

    message = str(caught.value)
    assert message.startswith(f"tool {fn.__name__}: ")
    for word in words:
        assert word in message


def test_a_broken_tool_fails_when_its_class_is_defined():
    with pytest.raises(ToolSchemaError, match="parameter 'actions' is not described"):

        class Broken(Env):
            @tool
            def submit_schedule(self, actions: list[int]) -> dict:
                """Submit the day's schedule."""


def test_every_broken_tool_of_a_class_is_reported_in_one_error():
    with pytest.raises(ToolSchemaError) as caught:

        class Broken(Env):
            @tool
            def price(self, hour: int) -> float:
                """The price of one hour.

                Args:
                    hour: the hour, 0 to 23
                """

            submit = tool(_undescribed)
            charge = tool(_no_hint)
            discharge = tool(_star_args)

    header, *lines = str(caught.value).splitlines()
    assert header == "Broken has 3 tool(s) that cannot be described:"
    assert lines == [
        "    tool _undescribed: parameter 'actions' is not described; add it under 'Args:' in "
        + "the docstring, as '    actions: what it is'",
        "    tool _no_hint: parameter 'actions' has no type hint; add one, as 'actions: str'",
        "    tool _star_args: parameter '*actions' takes any number of values, which a JSON "
        + "schema cannot name; replace it with a list, as 'actions: list[str]'",
    ]


def test_a_broken_tool_of_a_base_class_is_reported_where_it_is_inherited():
    class Mixin:  # not an Env: nothing checks it until an Env inherits its tools
        charge = tool(_no_hint)

    with pytest.raises(ToolSchemaError, match="tool _no_hint: parameter 'actions'"):

        class Battery(Mixin, Env):
            pass


def test_a_broken_tool_withdrawn_by_a_subclass_is_no_problem():
    class Mixin:
        charge = tool(_no_hint)

    class Battery(Mixin, Env):
        charge = None

    assert Battery.tool_schemas() == []


def test_tool_schema_error_is_corral_s_and_importable_from_the_env_sdk():
    assert ToolSchemaError is corral.errors.ToolSchemaError
    assert schema_module.ToolSchemaError is corral.errors.ToolSchemaError
    assert issubclass(ToolSchemaError, corral.errors.CorralError)


@pytest.mark.parametrize("name", ["reset", "end_turn", "report", "tool_schemas"])
def test_a_tool_named_like_an_env_method_is_refused_with_a_rename(name):
    def fn(self) -> str:
        """Do it."""

    fn.__name__ = name

    with pytest.raises(ToolSchemaError, match=f"tool {name}: .*rename the tool"):
        type("Clash", (Env,), {name: tool(fn)})
