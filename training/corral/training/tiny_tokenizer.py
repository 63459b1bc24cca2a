"""The tiny model's tokenizer: a byte-level BPE trained here, wrapped as a Qwen3-like HF tokenizer
with Qwen3's special tokens and the Qwen3 chat template TRL ships (which TRL recognises, so it
parses the model's tool calls and renders with its prefix-preserving training template).

Trained on generic tool-calling chats made up here, or on a bundle's own conversations, which
take far fewer ids: with `common_lines`, every line that most of them share (the template's
tool preamble, each tool's schema, the system prompt) becomes a token of its own, as a large
tokenizer's merges would make it a few tokens, and a conversation of the codeword bundle is
~60 ids instead of ~430.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2
import trl
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

QWEN3_TEMPLATE = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text(encoding="utf-8")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but not special in Qwen3, so decoding with skip_special_tokens keeps them.
TAG_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
VOCAB_SIZE = 1024
_ENGLISH = """
The agent reads the task and plans a schedule: it puts each job on one of the machines, in order,
then calls a tool with the actions as a list of numbers and waits for the result. If the tool
returns an error, it tries again; when the score is good enough it answers the user that the plan
is done. Every step takes some time, so the first answer should be right. Return JSON.
"""
_WORDS = re.findall(r"\w+", _ENGLISH)


def build_tokenizer(
    chats: Iterable[dict[str, Any]],
    *,
    vocab_size: int = VOCAB_SIZE,
    split_digits: bool = False,
    common_lines: bool = False,
    max_positions: int = 2048,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `chats` rendered with the Qwen3 template.

    Args:
        chats: The template's variables for each conversation (`messages`, `tools`, ...).
        vocab_size: The vocabulary, special and tag tokens included (common lines come on top).
        split_digits: Every digit a token of its own.
        common_lines: Every line of 12 characters or more that half of the chats or more share
            becomes a token of its own.
        max_positions: The tokenizer's `model_max_length`.
    """
    tokenizer = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits
        else byte_level
    )
    tokenizer.decoder = decoders.ByteLevel()
    added = SPECIAL_TOKENS + TAG_TOKENS
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(added),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    environment.filters["tojson"] = json.dumps
    render = environment.from_string(QWEN3_TEMPLATE).render
    splitter = re.compile("|".join(map(re.escape, added)))
    pieces = [splitter.split(render(**chat)) for chat in chats]
    tokenizer.train_from_iterator((piece for text in pieces for piece in text), trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    if common_lines:
        tokenizer.add_tokens([AddedToken(line, special=False, normalized=False) for line in _shared_lines(pieces)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=QWEN3_TEMPLATE,
        model_max_length=max_positions,
    )


def _shared_lines(chats: list[list[str]]) -> list[str]:
    """The lines (of 12 characters or more) that at least half of the chats have, longest first."""
    counts = Counter(line for pieces in chats for line in {line for piece in pieces for line in piece.split("\n")})
    return sorted(
        (line for line, n in counts.items() if n >= len(chats) / 2 and len(line) >= 12), key=len, reverse=True
    )


def sample_chats(rng: random.Random, count: int) -> Iterable[dict[str, Any]]:
    """Generic tool-calling chats (template variables), the default tokenizer's training text."""
    return (_sample_chat(rng) for _ in range(count))


def _sample_chat(rng: random.Random) -> dict[str, Any]:
    """Template variables of a random tool-calling chat; rendered, the tokenizer's training text."""

    def words(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    def value() -> Any:
        return rng.choice(
            [
                rng.randrange(-5, 1000),
                [rng.randrange(10) for _ in range(rng.randrange(1, 12))],
                words(rng.randrange(1, 4)),
                rng.random() < 0.5,
            ]
        )

    names = ["_".join(rng.sample(_WORDS, 2)) for _ in range(2)]
    parameters = {
        "type": "object",
        "properties": {rng.choice(_WORDS): {"type": "array", "items": {"type": "integer"}}},
        "required": [],
    }
    tools = [
        {
            "type": "function",
            "function": {"name": n, "description": words(8), "parameters": parameters},
        }
        for n in names
    ]
    call = {"function": {"name": names[0], "arguments": {rng.choice(_WORDS): value()}}}
    answer = json.dumps({rng.choice(_WORDS): value(), "reward": rng.random()})
    messages = [
        {"role": "system", "content": _ENGLISH},
        {"role": "user", "content": words(20) + " " + json.dumps({rng.choice(_WORDS): value()})},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": answer},
        {"role": "assistant", "content": words(5) + "."},
    ]
    return {"messages": messages, "tools": tools}
