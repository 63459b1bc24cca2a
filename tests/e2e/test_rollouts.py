"""Token audit of CorralRollout's episodes against live corral servers (Bundle.local, local sandbox).

What the trainer learns from must be exactly what the model did: the ids the loss sees are the
ids the model sampled, every id rendered from the server's answers is masked, and the whole
sequence decodes to the chat template's rendering of the conversation. The tiny model's outputs
are random, so the audits are driven by a scripted generator that emits chosen ids (including
bad tool calls); one audit samples the real model, and one goes through the vLLM stand-in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import AutoModelForCausalLM

from corral.client import Bundle
from corral.training.accounting import StepAccount
from corral.training.cpu import one_cpu_thread
from corral.training.generation import Sample, SamplingParams, TransformersGenerator, VLLMGenerator
from corral.training.processors import HermesProcessor
from corral.training.rollouts import CorralRollout, Rollout, chat_tools
from corral.training.tiny import Lesson, teach_tool_call
from tests.conftest import BUNDLES, FIXTURES
from tests.e2e.vllm_standin import serve_standin

pytestmark = [pytest.mark.trl, pytest.mark.usefixtures("no_leftover_env_processes")]


@pytest.fixture(scope="module")
def processor(tokenizer) -> HermesProcessor:
    return HermesProcessor.for_trainer(tokenizer, {"enable_thinking": False})


@pytest.fixture(scope="module")
def tictactoe() -> Iterator[Bundle]:
    with Bundle.local(BUNDLES / "tictactoe", split="train", sandbox="local") as bundle:
        yield bundle


@pytest.fixture(scope="module")
def taught_model(model_dir: Path, tictactoe: Bundle, tmp_path_factory: pytest.TempPathFactory):
    """The tiny model, taught to open a game with a place call, so that its own samples call a
    tool and read the answer (its output stays random enough to go wrong in many ways)."""
    taught = tmp_path_factory.mktemp("taught") / "model"
    shutil.copytree(model_dir, taught)
    prompt = [{"role": m["role"], "content": m["content"]} for m in tictactoe.dataset[0]["prompt"]]
    lesson = Lesson(prompt=prompt, tool="place", arguments={"row": 2, "col": 2})
    teach_tool_call(taught, [lesson], chat_tools(tictactoe.toolsets["tictactoe"]), steps=150)
    return AutoModelForCausalLM.from_pretrained(taught, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def gridsim() -> Iterator[Bundle]:
    with Bundle.local(BUNDLES / "gridsim", split="train", sandbox="local") as bundle:
        yield bundle


class Recording:
    """Wraps a generator and keeps every sample it returned, in order."""

    def __init__(self, generator: Any):
        self.generator = generator
        self.samples: list[Sample] = []

    def generate(self, prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        sample = self.generator.generate(prompt_ids, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids)
        self.samples.append(sample)
        return sample


class Scripted:
    """A generator whose next output is chosen by `policy` from the decoded context so far."""

    def __init__(self, tokenizer, policy: Callable[[str], str]):
        self.tokenizer = tokenizer
        self.policy = policy

    def generate(self, prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        text = self.policy(self.tokenizer.decode(prompt_ids))
        ids = self.tokenizer.encode(text, add_special_tokens=False) + stop_token_ids[:1]
        return Sample(token_ids=ids, logprobs=[-0.5] * len(ids), stopped=True)


def call(name: str, **arguments: Any) -> str:
    """A tool call as Qwen3 writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def play(bundle: Bundle, processor: HermesProcessor, generator: Any, row: int = 0, **options: int) -> Rollout:
    """Play the episode of the bundle's row `row` with `generator`, as the rollout_func plays it."""
    rollout_func = CorralRollout(bundle, processor=processor, generator=generator, **options)
    try:
        (rollout,) = rollout_func.play([rollout_func.dataset[row]["prompt"]])
    finally:
        rollout_func.close()
    return rollout


def runs(rollout: Rollout, sampled: bool) -> list[list[int]]:
    """The maximal runs of completion ids that were sampled (or rendered from the env)."""
    found: list[list[int]] = []
    previous = None
    for token, mask in zip(rollout.completion_ids, rollout.env_mask, strict=True):
        if bool(mask) == sampled:
            if previous != mask:
                found.append([])
            found[-1].append(token)
        previous = mask
    return found


def audit(rollout: Rollout, samples: list[Sample], tokenizer, processor: HermesProcessor) -> None:
    """The token audit: the loss sees exactly the sampled ids, env ids are masked, text is the template's."""
    assert len(rollout.completion_ids) == len(rollout.env_mask) == len(rollout.logprobs)
    # Every sample is one run of unmasked ids, in order, unchanged; every other id is masked.
    assert runs(rollout, sampled=True) == [s.token_ids for s in samples]
    sampled_logprobs = [lp for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if m]
    assert sampled_logprobs == [lp for s in samples for lp in s.logprobs]
    assert all(lp == 0.0 for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if not m)
    # The masked runs are the server's answers, each rendered as the template continues after a turn.
    answers = [m for m in rollout.messages if m["role"] in ("tool", "user")][1:]  # after the first prompt
    assert len(runs(rollout, sampled=False)) == len(samples) - 1
    assert sum(len(run) for run in runs(rollout, sampled=False)) > 0 and answers
    # The whole sequence decodes to the chat template's rendering of the conversation (which
    # writes a newline after the last <|im_end|>, the model's stop token, that nobody samples).
    text = tokenizer.decode(rollout.prompt_ids + rollout.completion_ids)
    assert text + "\n" == processor.render(rollout.messages, tools=rollout.tools)


_BOARD = re.compile(r"1 ([.XO]) ([.XO]) ([.XO])\n2 ([.XO]) ([.XO]) ([.XO])\n3 ([.XO]) ([.XO]) ([.XO])")


class TicTacToePlayer:
    """Each turn: place an X on the first free square of the board the turn's prompt shows, then
    end the turn, alternately with an end_turn call and with a plain reply (which the rollout
    sends as end_turn's response, the next prompt coming back as a user turn)."""

    def __init__(self) -> None:
        self.placed = False
        self.turns = 0

    def __call__(self, context: str) -> str:
        if not self.placed:
            self.placed = True
            free = _BOARD.findall(context)[-1].index(".")
            return call("place", row=free // 3 + 1, col=free % 3 + 1)
        self.placed, self.turns = False, self.turns + 1
        return call("end_turn", response="your move") if self.turns % 2 else "Your move."


# The first free square each turn: against the train split's first three opponents (seeded)
# that loses, draws and wins.
@pytest.mark.parametrize(("row", "reward"), [(0, 0.0), (1, 0.5), (2, 1.0)], ids=["loss", "draw", "win"])
def test_tictactoe_episode_is_token_exact_over_several_turns(
    tictactoe, tokenizer, processor, row: int, reward: float
) -> None:
    generator = Recording(Scripted(tokenizer, TicTacToePlayer()))

    rollout = play(tictactoe, processor, generator, row=row, max_completion_length=4096)

    audit(rollout, generator.samples, tokenizer, processor)
    turns = [m for m in rollout.messages if m["role"] == "user"]
    assert len(turns) >= 2  # the first prompt, and a next turn's prompt as a user message
    assert sum(m["role"] == "tool" and m["name"] == "end_turn" for m in rollout.messages) >= 1
    assert (rollout.status, rollout.reward, rollout.unscored_reason, rollout.truncated) == (
        "scored",
        reward,
        None,
        None,
    )


def test_gridsim_episode_with_tool_errors_is_token_exact(gridsim, tokenizer, processor) -> None:
    script = iter(
        [
            '<tool_call>\n{"name": "submit_schedule", "arguments": {"actions": [0, 0}\n</tool_call>',  # not JSON
            call("submit_schedule", actions="idle"),  # arguments the tool refuses
            call("charge", mw=5),  # a tool the task does not offer
            "Let me submit an idle day.\n" + call("submit_schedule", actions=[0] * 24),
            call("end_turn", response="done"),
        ]
    )
    generator = Recording(Scripted(tokenizer, lambda context: next(script)))

    rollout = play(gridsim, processor, generator, max_completion_length=4096)

    audit(rollout, generator.samples, tokenizer, processor)
    assert rollout.tool_calls == 5 and rollout.tool_errors == 3
    errors = [m["content"] for m in rollout.messages if m["role"] == "tool"][:3]
    assert (
        "not valid JSON" in errors[0]
        and "must be an array of integers" in errors[1]
        and "no tool 'charge'" in errors[2]
    )
    assert rollout.reward == pytest.approx(0.2)  # the idle day, as the server scores it


def test_a_cut_episode_says_so_and_is_scored_for_what_the_model_did(gridsim, tokenizer, processor) -> None:
    generator = Recording(Scripted(tokenizer, lambda context: call("submit_schedule", actions=[0] * 24)))

    rollout = play(gridsim, processor, generator, max_completion_length=4096, max_tool_calls=2)

    assert rollout.truncated == "tool_calls" and rollout.tool_calls == 2
    assert runs(rollout, sampled=True) == [s.token_ids for s in generator.samples]
    assert rollout.reward == pytest.approx(0.2)  # the server ended the turn with an empty reply and scored it


def test_episodes_of_two_toolsets_run_at_once_and_a_crash_the_agent_caused_is_counted_failed_with_its_reason(
    tokenizer, processor
) -> None:
    def policy(context: str) -> str:  # each prompt's first call: the toy env crashes, the counter counts
        if "<tool_response>" in context:
            return call("end_turn", response="done")
        return call("crash") if '"name": "crash"' in context else call("add", amount=3)

    with Bundle.local(FIXTURES / "toybox", split="mixed", sandbox="local") as toybox:
        rollout_func = CorralRollout(
            toybox, processor=processor, generator=Scripted(tokenizer, policy), max_completion_length=1024
        )
        prompts = [row["prompt"] for row in rollout_func.dataset for _ in range(2)]  # groups of two
        rollouts = rollout_func.play(prompts)
        rollout_func.close()

    by_task = {r.task_id: r for r in rollouts}
    assert [r.task_id for r in rollouts] == ["say-apple", "say-apple", "count-3", "count-3"]
    assert by_task["count-3"].reward == 1.0 and by_task["count-3"].toolset == "counter"
    # The agent's own call killed its env: a failure of the agent's, scored the task's failure score.
    crashed = by_task["say-apple"]
    assert (crashed.status, crashed.reward) == ("failed", 0.0) and "died" in crashed.unscored_reason
    account = StepAccount.of(rollouts, group_size=2)
    assert (
        account.scored,
        account.failed,
        account.unscored,
        account.groups_under_two_scored,
        account.groups_zero_variance,
    ) == (4, 2, 0, 0, 2)
    assert account.reward_by_toolset == {"counter": 1.0, crashed.toolset: 0.0}
    assert account.failed_reasons == {crashed.unscored_reason: 2}


def assert_logprobs_are_the_models(model, rollout: Rollout, temperature: float = 1.0) -> None:
    """The kept logprobs are the model's log-probabilities of the sampled ids in their context."""
    ids = torch.tensor([rollout.prompt_ids + rollout.completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(rollout.prompt_ids) - 1 : -1] / temperature
    expected = torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(rollout.completion_ids)[:, None])[:, 0]
    mask = torch.tensor(rollout.env_mask, dtype=torch.bool)
    assert torch.allclose(torch.tensor(rollout.logprobs)[mask], expected[mask], atol=1e-4)


def assert_a_game_too_short_to_win(rollout: Rollout) -> None:
    """The model's game of the first task (a tactical O) in 200 completion ids: they hold at most
    two of X's turns (each a place call, its answer, O's move and the board), too few to win or
    draw against an O that blocks. Whatever it sampled, the game is lost or left unfinished, and
    the server scores that 0: a reward missing, or any other, is the rollout's error."""
    assert (rollout.status, rollout.reward, rollout.unscored_reason) == ("scored", 0.0, None)


def test_an_episode_sampled_from_the_real_model_keeps_its_ids_and_logprobs(
    taught_model, tictactoe, tokenizer, processor
) -> None:
    model = taught_model
    generator = Recording(TransformersGenerator(model, SamplingParams(temperature=1.0)))
    torch.manual_seed(0)

    with one_cpu_thread():
        rollout = play(tictactoe, processor, generator, max_completion_length=200)
        assert_logprobs_are_the_models(model, rollout)

    assert runs(rollout, sampled=True) == [s.token_ids for s in generator.samples]
    assert all(lp == 0.0 for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if not m)
    assert rollout.tool_calls >= 1 and 0 in rollout.env_mask  # it called place and read the answer
    # (Text equality is the scripted audits' to prove: a random sample may write `</think>`,
    # which the Qwen3 template re-renders as reasoning.)
    assert_a_game_too_short_to_win(rollout)
    assert rollout.truncated in (None, "completion_length")


def test_the_vllm_path_produces_the_same_token_exact_trace(taught_model, tictactoe, tokenizer, processor) -> None:
    model = taught_model
    with one_cpu_thread(), serve_standin(model, tokenizer, served_name="tiny") as url:
        vllm = VLLMGenerator(url, model="tiny", sampling=SamplingParams(temperature=1.0))
        generator = Recording(vllm)
        rollout = play(tictactoe, processor, generator, max_completion_length=200)
        vllm.close()
        assert_logprobs_are_the_models(model, rollout)

    assert generator.samples and runs(rollout, sampled=True) == [s.token_ids for s in generator.samples]
    assert all(lp == 0.0 for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if not m)
    assert_a_game_too_short_to_win(rollout)


def test_a_prompt_finds_its_task_by_tag_or_by_unique_text_and_fails_clearly_otherwise(tictactoe, gridsim) -> None:
    ttt = CorralRollout(tictactoe)
    tagged = ttt.dataset[3]["prompt"]
    assert ttt.task_of(tagged)["task_id"] == ttt.dataset[3]["task_id"]
    untagged = [{"role": m["role"], "content": m["content"]} for m in tagged]
    with pytest.raises(ValueError, match="is the prompt of 250 tasks .* train on rollout.dataset"):
        ttt.task_of(untagged)  # every tic-tac-toe task opens with the same board

    grid = CorralRollout(gridsim)
    row = grid.dataset[5]
    assert (
        grid.task_of([{"role": m["role"], "content": m["content"]} for m in row["prompt"]])["task_id"] == row["task_id"]
    )
    with pytest.raises(ValueError, match="matches no task of bundle gridsim"):
        grid.task_of([{"role": "user", "content": "Schedule a battery."}])
