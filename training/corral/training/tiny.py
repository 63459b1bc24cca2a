"""A tiny Qwen3-style causal LM, built offline in well under a second, to run TRL end to end on CPU
(the `--tiny` mode of the recipes, and the tests).

`make_tiny_model` writes a randomly initialised 2-layer Qwen3 model, a byte-level BPE tokenizer
trained here on generated chat text, and the Qwen3 chat template TRL ships. TRL recognises that
template by identity: it attaches its Qwen3 response parser (so tool calls are parsed) and renders
with its prefix-preserving Qwen3 training template.

`teach_tool_call` fine-tunes the model for a few seconds so that, given a prompt rendered the way
`GRPOTrainer` renders it, it usually answers with a given tool call, then ends its turn once the
tool has answered. `sample_tool_calls` samples the model and parses its answers as the trainer does.
Wrap other torch work on the model (e.g. `trainer.train()`) in `corral.training.cpu.one_cpu_thread()`.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach for the Hub

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BatchEncoding,
    GenerationConfig,
    PreTrainedTokenizerBase,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from trl.chat_template_utils import (
    add_response_schema,
    get_training_chat_template,
    is_chat_template_prefix_preserving,
    parse_response,
)

from corral.errors import ConfigError
from corral.training.cpu import one_cpu_thread
from corral.training.presets import activation_checkpointing
from corral.training.tiny_tokenizer import VOCAB_SIZE, build_tokenizer, sample_chats

_COMPLETE = "tiny_model_complete"

Tool = Callable[..., Any] | dict[str, Any]
"""A tool as `apply_chat_template` takes it: a typed function with a Google docstring, or JSON."""

CPU_RUN_SETTINGS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    **activation_checkpointing(False),
}
"""Fields of every TRL config (they come from `TrainingArguments`) for a run of the tiny model on
a CPU: float32 on the CPU, no tracker, and no activation checkpointing (TRL turns it on to save
GPU memory; a tiny model only pays its time)."""


VLLM_SHAPE: dict[str, Any] = {"hidden_size": 128, "tied": False}
"""`make_tiny_model`'s arguments for a model vLLM serves: vLLM's CPU attention takes heads of 32
dims or more (the default width gives 16, and crashes it on the first request), and with tied
embeddings vLLM on CPU keeps its old output head when the weights are reloaded."""


def make_tiny_model(
    out_dir: Path,
    *,
    seed: int = 0,
    chats: Iterable[dict[str, Any]] | None = None,
    vocab_size: int = VOCAB_SIZE,
    split_digits: bool = False,
    common_lines: bool = False,
    hidden_size: int = 64,
    layers: int = 2,
    max_positions: int = 2048,
    tied: bool = True,
) -> Path:
    """Write a tiny Qwen3 causal LM and its tokenizer to `out_dir`, unless a complete one is there.

    Args:
        out_dir: Folder to hold the model; created (with its parents) when missing.
        seed: Seed of the generated tokenizer corpus and of the weight initialisation.
        chats: The conversations to train the tokenizer on, as the chat template's variables
            (`messages`, `tools`, ...): a bundle's own, so that its conversations take few ids.
            By default generic tool-calling chats made up here.
        vocab_size: The tokenizer's vocabulary, special tokens included.
        split_digits: Keep every digit a token of its own (as Qwen does), so that a number
            copied from a tool's answer into a call is the same ids in both.
        common_lines: Make each line that most `chats` share one token (see `tiny_tokenizer`).
        hidden_size: The model's width (4 attention heads, 2 of them for keys and values).
        layers: Its decoder layers.
        max_positions: The longest sequence it takes.
        tied: Share the input embeddings with the output head. For vLLM, see `VLLM_SHAPE`.

    Returns:
        `out_dir`, loadable with `from_pretrained` and usable as `GRPOTrainer(model=str(out_dir))`.
    """
    out_dir = Path(out_dir)
    if (out_dir / _COMPLETE).exists():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-model-", dir=out_dir.parent))
    chats = sample_chats(random.Random(seed), 300) if chats is None else chats
    tokenizer = build_tokenizer(
        chats, vocab_size=vocab_size, split_digits=split_digits, common_lines=common_lines, max_positions=max_positions
    )
    tokenizer.save_pretrained(staging)
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tied,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(  # as Qwen3: either token ends a turn
        eos_token_id=[tokenizer.eos_token_id, tokenizer.pad_token_id],
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(staging)
    (staging / _COMPLETE).touch()
    try:
        staging.rename(out_dir)
    except OSError:  # another process finished first, or `out_dir` holds an incomplete model
        if (out_dir / _COMPLETE).exists():
            shutil.rmtree(staging, ignore_errors=True)
        else:
            shutil.rmtree(out_dir, ignore_errors=True)
            staging.rename(out_dir)
    return out_dir


@dataclass(frozen=True)
class Lesson:
    """A prompt and the tool call the model should answer it with.

    Attributes:
        prompt: The messages exactly as `GRPOTrainer` sends them: the dataset row's `prompt`, with
            the environment's `reset()` observation appended to the last message's content.
        tool: Name of the tool to call.
        arguments: Arguments of the call, as the tool's JSON schema types them.
        result: Tool answer in the taught conversation (the model learns to stop after any answer).
        reply: The model's turn after the tool answered; empty to end the turn at once.
    """

    prompt: list[dict[str, str]]
    tool: str
    arguments: dict[str, Any]
    result: str = '{"ok": true}'
    reply: str = ""


def teach_tool_call(
    model_dir: Path,
    lessons: Sequence[Lesson],
    tools: Sequence[Tool],
    *,
    steps: int = 100,
    learning_rate: float = 3e-3,
) -> float:
    """Fine-tune the model in `model_dir`, in place, to answer each lesson's prompt with its call.

    Trains on whole conversations (prompt, tool call, tool answer, reply) rendered with the chat
    template the trainer renders with, the loss on the assistant turns only. So few steps leave the
    model sampling the call most of the time but not always, which gives a GRPO group rewards that
    differ: after 100 steps on two lessons, 8 to 11 of 16 answers sampled at temperature 1 parse
    as the call, and 12 to 14 after 150 steps.

    Args:
        model_dir: Model folder written by `make_tiny_model`; its weights are overwritten.
        lessons: Prompts, and the tool call to answer each with; each step trains on all of them.
        tools: Tools offered in every prompt, as the trainer offers them (the env's methods).
        steps: Optimiser steps.
        learning_rate: AdamW learning rate.

    Returns:
        The loss of the last step, per assistant token.
    """
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    template = _trainer_chat_template(tokenizer)
    encoded = [_encode_lesson(tokenizer, template, lesson, tools) for lesson in lessons]
    ids = [ids for ids, _ in encoded]
    input_ids = pad_sequence(ids, batch_first=True, padding_value=tokenizer.pad_token_id)
    labels = pad_sequence([labels for _, labels in encoded], batch_first=True, padding_value=-100)
    attention_mask = pad_sequence([torch.ones_like(i) for i in ids], batch_first=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    loss = torch.tensor(float("nan"))
    with one_cpu_thread():
        for _ in range(steps):
            loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    model.save_pretrained(model_dir)
    return loss.item()


def _trainer_chat_template(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The template `GRPOTrainer` renders with when it has tools; `None` for the tokenizer's own."""
    if is_chat_template_prefix_preserving(tokenizer):
        return None
    return get_training_chat_template(tokenizer)


def _encode_lesson(
    tokenizer: PreTrainedTokenizerBase, template: str | None, lesson: Lesson, tools: Sequence[Tool]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of a lesson's whole conversation, and its labels (-100 outside assistant turns)."""
    call = {"type": "function", "function": {"name": lesson.tool, "arguments": lesson.arguments}}
    messages = [
        *lesson.prompt,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": lesson.tool, "content": lesson.result},
        {"role": "assistant", "content": lesson.reply},
    ]
    encoded = tokenizer.apply_chat_template(
        messages,  # type: ignore[arg-type]  # transformers types a message dict[str, str]; tool_calls is a list
        tools=list(tools),
        chat_template=template,
        enable_thinking=False,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert isinstance(encoded, BatchEncoding)  # tokenize=True, return_dict=True: the named outputs
    input_ids = torch.tensor(encoded["input_ids"])
    mask = torch.tensor(encoded["assistant_masks"], dtype=torch.bool)
    if not mask.any():
        raise ConfigError("the chat template marks no assistant tokens: no {% generation %} markers")
    return input_ids, input_ids.masked_fill(~mask, -100)


def sample_tool_calls(
    model_dir: Path,
    lesson: Lesson,
    tools: Sequence[Tool],
    *,
    samples: int = 16,
    max_new_tokens: int = 64,
    seed: int = 0,
) -> list[dict[str, Any] | None]:
    """Sample answers to a lesson's prompt at temperature 1 and parse them as `GRPOTrainer` does.

    The prompt is rendered with the trainer's chat template, thinking disabled; the answers are
    parsed by TRL's Qwen3 response parser, which types the arguments with the tools' schemas.

    Args:
        model_dir: Model folder.
        lesson: The prompt to answer, and the tool whose calls to collect.
        tools: Tools offered in the prompt.
        samples: Number of answers to sample.
        max_new_tokens: Length limit of each answer.
        seed: Sampling seed.

    Returns:
        Per answer, the arguments of its call of `lesson.tool` when it is exactly one such call,
        else `None`; compare them with `lesson.arguments` to count exact answers.
    """
    tokenizer = add_response_schema(AutoTokenizer.from_pretrained(model_dir))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    # tokenize=True, return_dict=False on one conversation: its ids (transformers types every form).
    prompt_ids = cast(
        list[int],
        tokenizer.apply_chat_template(
            lesson.prompt,
            tools=list(tools),
            chat_template=_trainer_chat_template(tokenizer),
            add_generation_prompt=True,
            enable_thinking=False,
            tokenize=True,
            return_dict=False,
        ),
    )
    input_ids = torch.tensor([prompt_ids] * samples)
    torch.manual_seed(seed)
    with torch.no_grad(), one_cpu_thread():
        output = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    calls: list[dict[str, Any] | None] = []
    for row in output[:, len(prompt_ids) :].tolist():
        ids = row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
        parsed = parse_response(tokenizer, ids, prefix=prompt_ids, tools=list(tools))
        match parsed.get("tool_calls"):
            case [{"function": {"name": lesson.tool, "arguments": arguments}}]:
                calls.append(arguments)
            case _:
                calls.append(None)
    return calls
