"""The recipes in examples/, run as a user runs them (`--tiny`, on this CPU), and the SFT gold data
they train on: played on a live server, rendered as GRPO renders its prompts."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from corral.client import Bundle, run_views
from corral.client.run_headers import read_metrics
from corral.client.run_index import RunIndex
from corral.protocol.record_store import EpisodeStore
from corral.training.rollouts import chat_tools
from corral.training.sft import gold_dataset, load_gold_calls, sampled_tool_calls, trainer_tools
from corral.training.tiny import Lesson, make_tiny_model, one_cpu_thread, teach_tool_call
from tests.conftest import BUNDLES, FIXTURES, REPO

pytestmark = [pytest.mark.trl, pytest.mark.usefixtures("no_leftover_env_processes")]
GRIDSIM = BUNDLES / "gridsim"
TOYBOX = FIXTURES / "toybox"  # one task: say apple, scored 1 when said, else 0


def run_recipe(script: str, *args: str, tmp_path: Path) -> str:
    """Run `examples/SCRIPT --tiny` in a fresh interpreter; its output, or a failure showing it.
    It has 240 s, within pytest's 300 s a test (pyproject.toml), set-up included."""
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / script), "--tiny", "--output-dir", str(tmp_path), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"},
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def test_gold_conversations_earn_the_optimum_and_extend_the_prompt_grpo_samples_from(tmp_path: Path) -> None:
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    with Bundle.local(GRIDSIM, split="train", sandbox="local") as env:
        data = gold_dataset(env, load_gold_calls(GRIDSIM, "train"), limit=3, concurrency=2)
        probe = env.factory()
        tools = trainer_tools(probe)
        methods = [probe.end_turn, probe.submit_schedule]  # what GRPOTrainer hands the template
        row = env.dataset[0]

    assert data["task_id"] == env.dataset["task_id"][:3]
    assert data["reward"] == [1.0, 1.0, 1.0]  # the server's verifier: the optimum
    assert [tool["function"]["name"] for tool in tools] == ["end_turn", "submit_schedule"]
    conversation = data[0]
    assert conversation["tools"] == tools
    assert [m["role"] for m in conversation["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert '"submitted":true,"feasible":true' in conversation["messages"][3]["content"]

    # Rendered as SFTTrainer renders it, the conversation starts with exactly the ids GRPOTrainer
    # samples the first turn from (the row's prompt, the factory's methods as tools, thinking off),
    # and the loss falls on the model's turns: the two calls and the closing turn.
    tokenizer = AutoTokenizer.from_pretrained(make_tiny_model(tmp_path / "model"))
    template = get_training_chat_template(tokenizer)
    grpo_prompt = tokenizer.apply_chat_template(
        row["prompt"],
        tools=methods,
        chat_template=template,
        add_generation_prompt=True,
        enable_thinking=False,
        tokenize=True,
        return_dict=False,
    )
    sft = tokenizer.apply_chat_template(
        conversation["messages"],
        tools=conversation["tools"],
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
        **conversation["chat_template_kwargs"],
    )
    assert sft["input_ids"][: len(grpo_prompt)] == grpo_prompt
    trained = tokenizer.decode([t for t, m in zip(sft["input_ids"], sft["assistant_masks"], strict=True) if m])
    actions = conversation["messages"][2]["tool_calls"][0]["function"]["arguments"]["actions"]
    assert f'"submit_schedule", "arguments": {{"actions": {actions}}}' in trained
    assert '"end_turn"' in trained and "tool_response" not in trained and "Day-ahead" not in trained


def test_sft_recipe_warm_starts_a_tiny_model_on_gold_episodes(tmp_path: Path) -> None:
    out = run_recipe("sft_gridsim.py", "--record", str(tmp_path / "records"), tmp_path=tmp_path)

    assert "4 gold episodes played on the server, lowest reward 1" in out
    assert "done: 2 steps" in out
    assert (tmp_path / "sft" / "model.safetensors").exists()
    # --record: the gold episodes, a run `corral view` lists, and the tokenizer beside them
    (played,) = run_views.runs(RunIndex(tmp_path / "records"))
    assert played.episodes == 4 and (tmp_path / "records" / "tokenizer" / "tokenizer.json").is_file()


@pytest.mark.parametrize("rollouts", ["environment_factory", "token_exact"])
def test_grpo_recipe_trains_two_steps_on_the_servers_rewards(tmp_path: Path, serve, rollouts: str) -> None:
    server = serve(TOYBOX, record_dir=tmp_path / "records")
    with Bundle(server.url, split="toy") as env:
        # A tiny model taught for a few steps to answer with the call that scores 1 (the tools
        # rendered as this way of rolling out renders them), so that the server scores 1 for
        # some of its rollouts, if not all.
        lesson = Lesson(prompt=env.dataset[0]["prompt"], tool="say", arguments={"text": "apple"})
        tools = (
            trainer_tools(env.factory())
            if rollouts == "environment_factory"
            else chat_tools(env.toolsets["toy:say+wait+crash"])
        )
    model_dir = make_tiny_model(tmp_path / "model")
    teach_tool_call(model_dir, [lesson], tools, steps=80)

    out = run_recipe(
        "grpo.py",
        "--server",
        server.url,
        "--split",
        "toy",
        "--model",
        str(model_dir),
        *(["--token-exact"] if rollouts == "token_exact" else []),
        tmp_path=tmp_path,
    )
    server.stop()  # writes the records still queued

    assert "grpo: 2 steps of 2 rollouts (2 per task), on 1 tasks" in out
    # Each step played its two rollouts on the server, and the reward the trainer logged for the
    # step is the mean of what the server scored them (the recipe prints it rounded). Some said
    # apple: a reward lost on the way (a 0, or None, in its place) would change a mean.
    done = re.search(r"done: (\d+) steps; mean reward per step: (\[.*\])", out)
    assert done is not None and done[1] == "2", out
    logged = ast.literal_eval(done[2])
    with EpisodeStore(tmp_path / "records") as store:
        served = [row.reward for row in reversed(store.find())]  # in the order the episodes ended
    assert len(served) == 4 and None not in served and sum(served) > 0, served
    assert logged == pytest.approx([sum(served[:2]) / 2, sum(served[2:]) / 2], abs=1e-3)


def test_grpo_recipe_records_a_run_corral_view_lists_and_reads_as_text(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from corral.cli.viewer.app import create_viewer

    records = tmp_path / "records"
    out = run_recipe("grpo.py", "--record", str(records), tmp_path=tmp_path)

    assert f"browse it with `corral view {records}`" in out
    index = RunIndex(records)
    (training,) = [row for row in run_views.runs(index) if row.header is not None and row.header.kind == "training"]
    assert training.steps == 2 and training.episodes == 4  # two steps of two rollouts
    assert "loss" in read_metrics([records], training.run)  # the trainer's half of each step
    viewer = TestClient(create_viewer(records))  # no --tokenizer: the one kept beside the records
    assert f"/runs/{training.run}" in viewer.get("/").text
    with EpisodeStore(records) as store:
        rollout = store.read(store.find(kind="rollouts", run=training.run)[0])
    page = viewer.get(f"/episodes/{rollout.episode_id}").text
    assert "id='tokens'" in page and "token-hint" not in page


def test_async_grpo_recipe_plays_the_pickled_factory_in_a_spawned_process(tmp_path: Path) -> None:
    records = tmp_path / "records"
    out = run_recipe(
        "async_grpo.py", "--vllm-server-url", "http://127.0.0.1:9", "--record", str(records), tmp_path=tmp_path
    )

    assert "AsyncGRPOConfig: 2 rollouts per task, 2 per step" in out
    assert "played 2 idle days in a spawned process: rewards [0.2, 0.2]" in out  # an idle day's grade
    assert "vLLM server at http://127.0.0.1:9: does not answer" in out
    assert "--tiny stops here" in out
    (played,) = run_views.runs(RunIndex(records))  # --record: the two days, a run `corral view` lists
    assert played.episodes == 2


def test_sampled_tool_calls_parses_the_calls_a_taught_model_makes(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with Bundle.local(GRIDSIM, split="train", sandbox="local") as env:
        probe = env.factory()
        tools = trainer_tools(probe)
    prompts = [[{"role": "user", "content": f"Submit a schedule for day {day}."}] for day in range(2)]
    model_dir = make_tiny_model(tmp_path / "model")
    zeros = {"actions": [0] * 24}
    teach_tool_call(
        model_dir, [Lesson(prompt=p, tool="submit_schedule", arguments=zeros) for p in prompts], tools, steps=150
    )

    with one_cpu_thread():
        answers = sampled_tool_calls(
            AutoModelForCausalLM.from_pretrained(model_dir),
            AutoTokenizer.from_pretrained(model_dir),
            prompts,
            tools,
            samples=4,
            max_new_tokens=96,
        )

    assert len(answers) == 8 and all(isinstance(calls, list) for calls in answers)
    parsed = [calls[0]["function"] for calls in answers if len(calls) == 1]
    # Taught for 150 steps, the model makes the call in most samples (see teach_tool_call).
    assert sum(call == {"name": "submit_schedule", "arguments": zeros} for call in parsed) >= 4, answers
