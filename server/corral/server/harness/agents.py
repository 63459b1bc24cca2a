"""The agents corral knows how to point at a model, as data: one entry per agent.

A harness env names its agent in env.toml (`[harness] agent = "mini-swe-agent"`); the entry
says which environment variables carry the base URL, the key and the model name, and, where
the agent has a usual command line, that command. Values are templates over the placeholders
below, filled in per episode by the runtime; nothing here runs anything.

    agent = KNOWN_AGENTS["mini-swe-agent"]
    command = fill(agent.command, values)   # values: a HarnessValues's as_dict()

Every agent gets `CORRAL_PROMPT` (the task's prompt) and `CORRAL_MODEL` besides its own
variables, so a plain script can read them whatever SDK it uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# What a command or variable may name: {base_url} ends in /v1, as OpenAI SDKs expect.
PLACEHOLDERS = frozenset({"base_url", "api_key", "model", "prompt", "step_limit"})
COMMON_ENVIRONMENT = {"CORRAL_PROMPT": "{prompt}", "CORRAL_MODEL": "{model}"}


@dataclass(frozen=True)
class KnownAgent:
    """How one agent is pointed at a model and started."""

    name: str
    description: str
    environment: Mapping[str, str]
    command: Sequence[str] = ()  # its usual command line; () where the env must give one
    notes: str = ""  # what an env author must know (installing it, its limits)


KNOWN_AGENTS: dict[str, KnownAgent] = {
    agent.name: agent
    for agent in (
        KnownAgent(
            name="openai",
            description="a program using an OpenAI SDK (any language): the base URL and key from the SDK's variables",
            environment={"OPENAI_BASE_URL": "{base_url}", "OPENAI_API_KEY": "{api_key}"},
            notes="its model name is in CORRAL_MODEL and the task in CORRAL_PROMPT",
        ),
        KnownAgent(
            name="mini-swe-agent",
            description="mini-swe-agent (PyPI), run without its interactive confirmation, as Harbor runs it",
            environment={
                "MSWEA_CONFIGURED": "true",  # skips its first-run setup wizard
                "MSWEA_COST_TRACKING": "ignore_errors",  # an unknown model's cost is 0, not an error
                "MSWEA_SILENT_STARTUP": "1",
                "MSWEA_API_KEY": "{api_key}",
                "OPENAI_API_KEY": "{api_key}",
                "OPENAI_API_BASE": "{base_url}",
                "OPENAI_BASE_URL": "{base_url}",
            },
            command=(
                "mini-swe-agent",
                "--yolo",
                "--exit-immediately",
                "--model=openai/{model}",
                "--task={prompt}",
                "--cost-limit=0",
                "-c",
                "mini",  # any -c replaces the default config, so name it first
                "-c",
                "agent.step_limit={step_limit}",
                "-c",
                "model.model_kwargs.api_base={base_url}",
            ),
            notes="install it in the env's image (pip install mini-swe-agent); the step limit is also held by corral",
        ),
    )
}


_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def unknown_placeholders(templates: Sequence[str]) -> set[str]:
    """The {names} in `templates` that are not PLACEHOLDERS (other braces, as in JSON, are text)."""
    return {name for template in templates for name in _PLACEHOLDER.findall(template)} - PLACEHOLDERS


def fill(templates: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Each template with its placeholders replaced in one pass (a value that itself holds
    "{model}", say a prompt, is not filled again); other braces stay as written."""
    return [_PLACEHOLDER.sub(lambda match: values.get(match[1], match[0]), template) for template in templates]
