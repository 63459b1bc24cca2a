"""Processors render an episode token-exact for their chat template and read the model's tool calls.

The Qwen3 family is checked on the tiny model's tokenizer (the Qwen3 template TRL ships); the
Llama 3.1 family on the real Llama 3.1 template text TRL ships (`trl/chat_templates/llama3_1.jinja`,
Meta's template as published) with a byte-level tokenizer made here that has Llama 3's special tokens.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = pytest.mark.trl  # TRL's templates, out of the fast tier

import trl
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from corral.training.processors import HermesProcessor, Llama3JsonProcessor, ToolCall
from corral.training.tiny import make_tiny_model

LLAMA3_1_TEMPLATE = (Path(trl.__file__).parent / "chat_templates" / "llama3_1.jinja").read_text(encoding="utf-8")
LLAMA3_SPECIAL = [
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "place",
            "description": "Place your X.",
            "parameters": {
                "type": "object",
                "properties": {"row": {"type": "integer"}, "col": {"type": "integer"}},
                "required": ["row", "col"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> HermesProcessor:
    tokenizer = AutoTokenizer.from_pretrained(make_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))
    return HermesProcessor.for_trainer(tokenizer, {"enable_thinking": False})


@pytest.fixture(scope="module")
def llama() -> Llama3JsonProcessor:
    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    model.train_from_iterator([json.dumps(TOOLS), "Environment: ipython Today Date place row col"], trainer)
    model.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA3_SPECIAL])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", chat_template=LLAMA3_1_TEMPLATE
    )
    return Llama3JsonProcessor(tokenizer)


def sampled(processor, text: str) -> list[int]:
    """The ids a model samples to write `text` and end its turn."""
    return processor.tokenizer.encode(text, add_special_tokens=False) + processor.stop_token_ids


def assert_token_exact(processor, messages, turns: list[tuple[str, list[dict]]]) -> None:
    """Prompt, then per turn the sampled text and the env's answers: the sequence built from
    chunks decodes to the template's rendering of the whole conversation."""
    ids = processor.render_prompt(messages, TOOLS)
    conversation = list(messages)
    for text, answers in turns:
        completion = sampled(processor, text)
        ids += completion
        conversation.append(processor.parse(completion).message())
        if answers:
            ids += processor.render_env_turn(answers)
            conversation += answers
    rendered = processor.render(conversation, tools=TOOLS)
    decoded = processor.tokenizer.decode(ids)
    assert rendered.startswith(decoded) and rendered[len(decoded) :].strip() == ""


def test_hermes_reads_calls_with_or_without_text_before_them(qwen) -> None:
    call = '<tool_call>\n{"name": "place", "arguments": {"row": 1, "col": 2}}\n</tool_call>'
    turn = qwen.parse(sampled(qwen, "I take the corner.\n" + call + "\n" + call.replace("1", "3")))
    assert turn.content == "I take the corner."
    assert turn.tool_calls == [ToolCall("place", {"row": 1, "col": 2}), ToolCall("place", {"row": 3, "col": 2})]
    assert qwen.parse(sampled(qwen, "Just text.")).tool_calls == []


def test_hermes_reports_an_unreadable_call_and_keeps_its_text(qwen) -> None:
    text = '<tool_call>\n{"name": "place", "arguments": {"row": 1,}\n</tool_call>'
    turn = qwen.parse(sampled(qwen, text))
    assert turn.tool_calls[0].error.startswith("the tool call is not valid JSON")
    assert turn.message() == {"role": "assistant", "content": text}  # renders back to what was sampled


def test_a_call_written_unlike_the_template_is_run_and_recorded_as_sampled(qwen) -> None:
    text = '<tool_call>{"name":"place","arguments":{"row":1,"col":2}}</tool_call>'
    turn = qwen.parse(sampled(qwen, text))
    assert turn.tool_calls == [ToolCall("place", {"row": 1, "col": 2})]
    assert turn.message() == {"role": "assistant", "content": text}


def test_hermes_accepts_arguments_written_as_a_json_string(qwen) -> None:
    turn = qwen.parse(
        sampled(qwen, '<tool_call>\n{"name": "place", "arguments": "{\\"row\\": 2, \\"col\\": 2}"}\n</tool_call>')
    )
    assert turn.tool_calls == [ToolCall("place", {"row": 2, "col": 2})]


def test_a_qwen3_episode_built_from_chunks_decodes_to_the_templates_rendering(qwen) -> None:
    call = '<tool_call>\n{"name": "place", "arguments": {"row": 2, "col": 2}}\n</tool_call>'
    assert_token_exact(
        qwen,
        [{"role": "system", "content": "Play X."}, {"role": "user", "content": "Your move."}],
        [
            ("Centre.\n" + call, [{"role": "tool", "name": "place", "content": '{"legal": true}'}]),
            ("Your move.", [{"role": "user", "content": "O played 1,1. Your move."}]),
            (call, []),
        ],
    )


def test_llama3_reads_its_json_calls_with_or_without_the_python_tag(llama) -> None:
    assert llama.parse(sampled(llama, '{"name": "place", "parameters": {"row": 1, "col": 3}}')).tool_calls == [
        ToolCall("place", {"row": 1, "col": 3})
    ]
    assert llama.parse(
        sampled(llama, '<|python_tag|>{"name": "place", "parameters": {"row": 2, "col": 1}}')
    ).tool_calls == [ToolCall("place", {"row": 2, "col": 1})]
    assert llama.parse(sampled(llama, "I resign.")).tool_calls == []
    assert llama.parse(sampled(llama, '{"row": 1}')).tool_calls[0].error.startswith("a tool call is a JSON object")


def test_a_llama3_episode_built_from_chunks_decodes_to_the_templates_rendering(llama) -> None:
    # Tools go into the first user message, results come back as `ipython` turns.
    prompt = llama.tokenizer.decode(llama.render_prompt([{"role": "user", "content": "Your move."}], TOOLS))
    assert prompt.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython")
    assert prompt.endswith("Your move.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    chunk = llama.tokenizer.decode(llama.render_env_turn([{"role": "tool", "name": "place", "content": "ok"}]))
    assert (
        chunk
        == '<|start_header_id|>ipython<|end_header_id|>\n\n"ok"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
    )
    assert_token_exact(
        llama,
        [{"role": "system", "content": "Play X."}, {"role": "user", "content": "Your move."}],
        [
            (
                '{"name": "place", "parameters": {"row": 2, "col": 2}}',
                [{"role": "tool", "name": "place", "content": '{"legal": true}'}],
            ),
            ("Your move.", [{"role": "user", "content": "O played 1,1. Your move."}]),
            ('{"name": "place", "parameters": {"row": 1, "col": 3}}', []),
        ],
    )
