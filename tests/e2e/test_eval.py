"""`corral eval` and `corral.training.evaluate`: a model over a split of a served bundle.

Against a served bundle with the tiny model (the command line, as a user runs it), and against the
vLLM stand-in serving a scripted model that solves exactly the even tasks, so that every number
the report gives is known in advance; one task's data is broken, and its episodes are reported
unscored with the reason. The rollouts' tokens join the server's records by episode id.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")


from corral.cli.main import app
from corral.client import Bundle, run_views
from corral.client.run_index import RunIndex
from corral.protocol.record_store import EpisodeStore
from corral.training.eval_report import pass_at_k
from corral.training.evaluation import evaluate
from corral.training.generation import Sample
from corral.training.processors import HermesProcessor
from corral.training.rollouts import CorralRollout
from tests.conftest import BUNDLES, FIXTURES
from tests.e2e.vllm_standin import serve_standin

pytestmark = [pytest.mark.trl, pytest.mark.usefixtures("no_leftover_env_processes")]


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def solves_the_even_tasks(context: str) -> str:
    """Says the task's own number on the even tasks, the next one on the odd; then ends its turn."""
    if "<tool_response>" in context:
        return ""
    number = int(re.findall(r"Task (\d+): say", context)[-1])
    return call("say", number=number if number % 2 == 0 else number + 1)


def test_pass_at_k_is_the_unbiased_estimate() -> None:
    assert pass_at_k(4, 1, 1) == 0.25
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)  # 1 - C(7,4)/C(10,4)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 2, 3) == 1.0
    with pytest.raises(ValueError, match="pass@4 needs at least 4 samples"):
        pass_at_k(3, 1, 4)


def test_evaluate_through_the_vllm_standin_reports_known_outcomes_and_unscored_reasons(
    model_dir: Path, tokenizer, tmp_path: Path
) -> None:
    with serve_standin(None, tokenizer, served_name="scripted", policy=solves_the_even_tasks) as url:
        report = evaluate(
            url,
            FIXTURES / "evalbox",
            split="eval",
            k=4,
            tokenizer=str(model_dir),
            concurrency=6,
            sandbox="local",
            max_completion_length=256,
            record_dir=tmp_path / "records",
            progress=False,
        )

    tasks = {task.task_id: task for task in report.tasks}
    for k in (1, 2, 4):
        assert [tasks[f"task-{i}"].pass_at(k) for i in range(6)] == [1.0, 0.0] * 3
        assert report.pass_at[k] == 0.5
    assert report.mean_reward == 0.5 and report.scored == 24 and report.episodes == 28
    broken = tasks["task-broken"]
    assert broken.unscored == 4 and broken.rewards == [] and broken.pass_at(1) is None
    ((reason, count),) = report.unscored_reasons.items()
    assert count == 4 and "this task has no target: its data is broken" in reason
    assert not report.failed_reasons
    table = report.table()
    assert "scripted at http://127.0.0.1" in table and "pass@4" in table
    assert "unscored (left out of the numbers): 4" in table and "4x the env could not start" in table
    with EpisodeStore(tmp_path / "records") as store:  # the server's side and the client's, both recorded
        assert store.tally().records == 28 and store.tally(kind="rollouts").records == 28
        assert store.tally(status="unscored").records == 4
    (run,) = [r.run for r in run_views.runs(RunIndex(tmp_path / "records")) if r.header is not None]
    header = RunIndex(tmp_path / "records").header(run)
    assert header is not None and (header.kind, header.bundle, header.split) == ("eval", "evalbox", "eval")
    assert header.model.startswith("scripted at http://127.0.0.1") and header.step is None and header.ended_at
    # The names the report gives are those `corral episodes` lists: the tokens' run, and the server's.
    assert f"rollouts recorded as run {run}; their episodes as the server's run {report.served_run}" in table
    listed = CliRunner().invoke(app, ["episodes", str(tmp_path / "records"), "--limit", "100"]).stdout
    assert {line.split()[-1] for line in listed.splitlines()[1:29]} == {report.served_run}  # its 28 rows


def test_a_turn_vllm_ends_on_the_generation_configs_other_eos_is_read_without_it(
    model_dir: Path, tokenizer, tmp_path: Path
) -> None:
    from transformers import GenerationConfig

    def ends_on_endoftext(context: str) -> str:
        return "Done.<|endoftext|>" if "<tool_response>" in context else solves_the_even_tasks(context)

    # The tiny model's generation config ends on <|endoftext|> as well as <|im_end|>, as Qwen3's does,
    # and vLLM stops on it whatever the request's stop_token_ids say.
    eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") in eos
    with serve_standin(None, tokenizer, served_name="scripted", policy=ends_on_endoftext, eos_token_ids=eos) as url:
        report = evaluate(
            url,
            FIXTURES / "evalbox",
            split="eval",
            k=1,
            tokenizer=str(model_dir),
            concurrency=2,
            sandbox="local",
            limit=2,
            max_completion_length=256,
            record_dir=tmp_path / "records",
            progress=False,
        )

    assert report.scored == 2 and report.pass_at[1] == 0.5
    with EpisodeStore(tmp_path / "records") as store:
        responses = [episode.calls[-1].arguments for episode in store.records(store.find())]
    assert responses == [{"response": "Done."}] * 2  # the stop id is no part of the answer


@pytest.fixture
def codeword_server(serve) -> Iterator[str]:
    yield serve(BUNDLES / "codeword", max_concurrent_envs=8).url


@pytest.mark.timing
def test_corral_eval_plays_the_tiny_model_on_a_served_bundle(
    model_dir: Path, codeword_server: str, tmp_path: Path
) -> None:
    numbers = tmp_path / "eval.json"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "corral"),
            "eval",
            str(model_dir),
            codeword_server,
            "--split",
            "eval",
            "-k",
            "2",
            "--limit",
            "3",
            "--max-tokens",
            "64",
            "--record",
            str(tmp_path / "records"),
            "--json",
            str(numbers),
        ],
        # Within pytest's 300 s a test (pyproject.toml), so that this limit is the one that fires.
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )

    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 tasks x 2 samples = 6 episodes" in done.stdout and "overall" in done.stdout
    result = json.loads(numbers.read_text())
    assert result["episodes"] == 6 and [t["task_id"] for t in result["tasks"]] == [
        "codeword-0600",
        "codeword-0601",
        "codeword-0602",
    ]
    assert 0.0 <= result["mean_reward"] <= 1.0 and set(result["pass_at"]) == {"1", "2"}
    with EpisodeStore(tmp_path / "records") as store:  # a remote server: only the client's side is here
        assert store.tally(kind="rollouts").records == 6
        # Each task's k samples are a group, its samples numbered; a folder no trainer saved has no step.
        placed = sorted((r.group, r.group_index, r.task_id, r.step) for r in store.records(store.find(kind="rollouts")))
        assert placed == [(g, i, f"codeword-060{g}", None) for g in range(3) for i in range(2)]


def test_a_rollouts_tokens_join_the_servers_record_by_episode_id(tokenizer, tmp_path: Path) -> None:
    records = tmp_path / "records"

    def gold(prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        context = tokenizer.decode(prompt_ids)
        answered = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", context)
        if not answered:
            text = call("lookup", word=re.findall(r'Code word: "(\w+)"', context)[-1])
        elif "number" in answered[-1]:
            text = call("submit", number=json.loads(answered[-1])["number"])
        else:
            text = "Done."
        ids = tokenizer.encode(text, add_special_tokens=False) + stop_token_ids[:1]
        return Sample(ids, [-0.1] * len(ids), True)

    generator = type("Gold", (), {"generate": staticmethod(gold)})()
    with Bundle.local(BUNDLES / "codeword", split="eval", sandbox="local", record_dir=records) as env:
        rollout_func = CorralRollout(
            env,
            processor=HermesProcessor.for_trainer(tokenizer, {"enable_thinking": False}),
            generator=generator,
            max_completion_length=512,
            record_dir=records,
        )
        played = rollout_func.play([row["prompt"] for row in rollout_func.dataset.select(range(2))])
        rollout_func.close()

    with EpisodeStore(records) as store:
        for rollout in played:
            served, tokens = store.episode(rollout.episode_id), store.rollout(rollout.episode_id)
            assert served.reward == rollout.reward == 1.0 and served.task_id == tokens.task_id == rollout.task_id
            assert [c.tool for c in served.calls] == ["lookup", "submit", "end_turn"]
            assert served.calls[2].arguments == {"response": "Done."}
            assert (tokens.prompt_ids, tokens.completion_ids, tokens.env_mask) == (
                rollout.prompt_ids,
                rollout.completion_ids,
                rollout.env_mask,
            )
            text = tokenizer.decode(tokens.completion_ids)
            assert json.dumps(served.calls[0].arguments)[1:-1] in text and served.calls[0].result in text


def corral_eval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "corral"), "eval", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    """The one line `corral eval` refused with (exit 2, no traceback)."""
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stdout == ""
    (line,) = done.stderr.splitlines()
    return line


def test_a_mistyped_model_path_is_one_line_saying_what_to_give(tmp_path: Path) -> None:
    line = one_line(corral_eval(str(tmp_path / "no-such-model"), str(BUNDLES / "codeword"), "--sandbox", "local"))

    assert line.startswith(f"error: cannot load the model '{tmp_path / 'no-such-model'}': there is no folder ")
    assert line.endswith("give a saved model's folder or a vLLM server's URL")


def test_a_folder_that_is_not_a_model_is_one_line_saying_what_to_give(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")

    line = one_line(corral_eval(str(tmp_path), str(BUNDLES / "codeword"), "--sandbox", "local"))

    assert line == (
        f"error: {tmp_path} is a folder but not a saved model (it has no config.json): give the folder a "
        "model was saved in (save_pretrained, a recipe's --output-dir) or a vLLM server's URL"
    )


def test_eval_takes_a_servers_token_as_an_option_and_says_so(model_dir: Path, serve, monkeypatch) -> None:
    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    url = serve(BUNDLES / "codeword", token="s3cret").url

    line = one_line(corral_eval(str(model_dir), url))
    assert line == (
        f"error: the server at {url} wants a bearer token and none was sent: pass --token TOKEN or set "
        "CORRAL_TOKEN to the token it was served with (corral serve --token)"
    )
    refused = one_line(corral_eval(str(model_dir), url, "--token", "wrong"))
    assert "pass the token it was served with (--token TOKEN or CORRAL_TOKEN)" in refused

    done = corral_eval(str(model_dir), url, "--token", "s3cret", "--limit", "1", "--max-tokens", "8")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 tasks x 1 samples = 1 episodes" in done.stdout


def test_a_model_on_the_cpu_samples_on_one_torch_thread(model_dir: Path, tokenizer) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    sampled_on: list[int] = []
    model.register_forward_pre_hook(lambda *_: sampled_on.append(torch.get_num_threads()))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # what an unlimited torch would sample on, even on a one-core machine
    try:
        evaluate(
            model,
            BUNDLES / "codeword",
            tokenizer=tokenizer,
            limit=1,
            max_completion_length=8,
            sandbox="local",
            progress=False,
        )
        assert torch.get_num_threads() == 2  # put back after
    finally:
        torch.set_num_threads(threads)
    assert sampled_on and set(sampled_on) == {1}


def test_samples_stop_at_the_models_context_and_the_report_says_so(tmp_path: Path) -> None:
    from corral.training.batching import BatchedGenerator
    from corral.training.tiny import make_tiny_model

    short = make_tiny_model(tmp_path / "short", max_positions=64)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(short)
    never = model.config.vocab_size + 1  # a stop id no sample holds: only a limit ends these samples
    generator = BatchedGenerator(model, pad_token_id=0, logprobs=False)
    sample = generator.generate(list(range(1, 61)), max_new_tokens=100, stop_token_ids=[never])
    assert len(sample.token_ids) == 4 and not sample.stopped  # 60 + 4 = the 64 positions it has

    report = evaluate(str(short), BUNDLES / "codeword", limit=2, sandbox="local", progress=False)  # prompts > 64 ids
    assert report.context_length == 64 and report.context_cut == 2 and report.scored == 2
    assert "note: 2 episode(s) reached the model's context of 64 positions" in report.table()
