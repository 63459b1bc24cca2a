"""The harness table of env.toml and the agents corral knows how to point at a model."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.server.bundles.format import EnvConfig
from corral.server.harness.agents import KNOWN_AGENTS, fill, unknown_placeholders

pytestmark = pytest.mark.fast

VALUES = {
    "base_url": "http://127.0.0.1:4000/v1",
    "api_key": "k",
    "model": "m",
    "prompt": "fix {model}",
    "step_limit": "7",
}


def test_mini_swe_agent_is_pointed_at_the_base_url_with_the_step_limit() -> None:
    harness = EnvConfig(entry="env:Env", harness={"agent": "mini-swe-agent", "step_limit": 7}).harness
    assert harness is not None
    command = fill(harness.agent_command(), VALUES)
    assert "--model=openai/m" in command and "agent.step_limit=7" in command
    assert "model.model_kwargs.api_base=http://127.0.0.1:4000/v1" in command
    assert command[command.index("-c") + 1] == "mini"  # the default config first: any -c replaces it
    environment = dict(
        zip(
            KNOWN_AGENTS["mini-swe-agent"].environment,
            fill(list(KNOWN_AGENTS["mini-swe-agent"].environment.values()), VALUES),
            strict=True,
        )
    )
    assert environment["OPENAI_BASE_URL"] == VALUES["base_url"] and environment["MSWEA_API_KEY"] == "k"


def test_fill_replaces_once_and_leaves_other_braces() -> None:
    # A prompt holding "{model}" is not filled again; JSON braces are text.
    assert fill(["--task={prompt}", '{"a": 1}', "{unknown}"], VALUES) == ["--task=fix {model}", '{"a": 1}', "{unknown}"]
    assert unknown_placeholders(['{"a": 1}', "{base_url}", "x{nope}"]) == {"nope"}


@pytest.mark.parametrize(
    ("harness", "names"),
    [
        ({"agent": "claude"}, "use one of ['mini-swe-agent', 'openai']"),
        ({"agent": "openai"}, "give command = [...]"),
        ({"agent": "openai", "command": ["python", "{script}"]}, "unknown placeholders ['script']"),
        ({"agent": "openai", "command": ["a"], "environment": {"X": "{keyy}"}}, "unknown placeholders ['keyy']"),
        ({"agent": "openai", "command": ["a"], "step_limit": 0}, "greater than or equal to 1"),
        ({"agent": "openai", "command": ["a"], "tools": []}, "Extra inputs are not permitted"),
    ],
)
def test_a_wrong_harness_is_refused_naming_the_fix(harness: dict, names: str) -> None:
    with pytest.raises(ValidationError, match=names.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        EnvConfig(entry="env:Env", harness=harness)


def test_an_openai_agent_with_its_own_command_needs_nothing_else() -> None:
    harness = EnvConfig(
        command=["python", "env.py"], harness={"agent": "openai", "command": ["python", "agent.py"]}
    ).harness
    assert harness is not None and harness.agent_command() == ["python", "agent.py"]
    assert (harness.step_limit, harness.timeout_s, harness.max_tokens) == (30, 600.0, 4096)
