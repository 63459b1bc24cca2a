"""`corral init --harness`'s bundle as its README plays it: served on the local sandbox, its
plain agent loop (stdlib only, the system's python3) runs in the sandbox against the stand-in
engine through corral's capture, and the verifier scores the word the agent wrote."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.client import Bundle
from tests.conftest import serving
from tests.harness_engine import MODEL, StandInEngine
from tests.harness_engine import serving as serving_app

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
WRONG = {"write-cobalt"}  # the tasks the scripted model answers wrongly


def writes_the_word(request: dict[str, Any]) -> dict[str, Any]:
    """A bash call writing the prompt's word (another for WRONG tasks), then a closing answer."""
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return {"role": "assistant", "content": "done"}
    word = re.search(r"the word (\w+)", messages[-1]["content"])[1]
    word = "wrong" if f"write-{word}" in WRONG else word
    command = {"command": f"echo {word} > /tmp/answer.txt"}
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": json.dumps(command)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, StandInEngine]]:
    root = tmp_path_factory.mktemp("init")
    assert CliRunner().invoke(app, ["init", "words", "--harness", "--path", str(root)]).exit_code == 0
    checked = CliRunner().invoke(app, ["check", str(root / "words"), "--sandbox", "local"])
    assert checked.exit_code == 0, checked.output
    engine = StandInEngine(reply=writes_the_word)
    with serving_app(engine.app()) as engine_url:
        for server in serving(root / "words"):
            yield server, engine_url, engine


@pytest.mark.parametrize(("task", "reward"), [("write-amber", 1.0), ("write-cobalt", 0.0)])
def test_the_starter_agent_runs_in_the_sandbox_and_its_word_is_scored(served, task: str, reward: float):
    server, engine_url, engine = served
    with Bundle(server.url, split="train") as bundle:
        row = next(row for row in bundle.dataset if row["task_id"] == task)
        env = bundle.factory()
        env.reset(**row, llm_url=engine_url, model=MODEL, temperature=0.5)
        before = len(engine.sampled)
        env.run_agent()
        assert env.get_reward() == reward
        assert len(engine.sampled) - before == 2  # the bash call, then the closing answer
        capture = env._episode.final.metadata["capture"]
        assert capture["summary"]["calls"] == 2 and capture["level"] == "tokens"


def test_over_the_relay_the_client_answers_the_agents_calls_from_its_own_engine(served):
    # The reset names no llm_url: only the relay (the client's engine, over its own WebSocket)
    # can answer, so an env host needs no route to the trainer's engine.
    server, engine_url, engine = served
    with Bundle(server.url, split="train", llm_url=engine_url, llm_model=MODEL) as bundle:
        row = next(row for row in bundle.dataset if row["task_id"] == "write-amber")
        env = bundle.factory()
        env.reset(**row)
        before = len(engine.sampled)
        env.run_agent()
        assert env.get_reward() == 1.0
        assert len(engine.sampled) - before == 2 and engine.sampled[-1].body["model"] == MODEL
        assert env._episode.final.metadata["capture"]["training_trace"]["turns"]
