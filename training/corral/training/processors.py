"""Processors: how one model family's chat template turns an episode into token ids and back.

A token-exact rollout never re-renders what the model sampled. It renders the first prompt once,
appends the sampled ids unchanged, and renders only what the environment adds (tool results, the
next turn's prompt) as chunks of ids of their own. A `Processor` does that rendering for one chat
template, and parses the model's output into tool calls, so the rollout can serve models whose
tool-call format TRL cannot parse.

Two families ship: `HermesProcessor` (Qwen2.5/Qwen3: `<tool_call>{json}</tool_call>`) and
`Llama3JsonProcessor` (Llama 3.1/3.2: the whole reply is one `{"name", "parameters"}` object).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

from transformers import PreTrainedTokenizerBase
from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

from corral.errors import ConfigError

Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model made; `error` says why it could not be read, if it could not."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Turn:
    """The model's sampled output, parsed: its text as sampled (stop token excluded), the text
    outside tool calls, and the tool calls."""

    text: str
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    verbatim: bool = False  # the calls are not written as the template writes them

    def message(self) -> Message:
        """The assistant message as the chat template takes it, rendering back to what was sampled.

        Well-formed calls written as the template writes them become `tool_calls`; otherwise the
        turn stays the text it was. No `tool_calls` key without calls: some templates (Llama's)
        test for the key, not its value.
        """
        if not self.tool_calls or self.verbatim or any(call.error is not None for call in self.tool_calls):
            return {"role": "assistant", "content": self.text if self.tool_calls else self.content}
        calls = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in self.tool_calls]
        return {"role": "assistant", "content": self.content, "tool_calls": calls}


class Processor(Protocol):
    """Renders an episode for one chat template, token-exact, and parses the model's output."""

    stop_token_ids: list[int]
    """Ids that end the model's turn; the generator stops on them and keeps them."""

    def render_prompt(self, messages: list[Message], tools: list[dict[str, Any]]) -> list[int]:
        """The first prompt (system and user messages, and the tools) through the generation prompt."""
        ...

    def render_env_turn(self, messages: list[Message]) -> list[int]:
        """What follows the model's turn (which ended on a stop token): tool results and/or the
        next user turn, through the next generation prompt. Exactly the ids the chat template
        renders there, so the whole sequence decodes to the template's rendering of the episode."""
        ...

    def parse(self, completion_ids: list[int]) -> Turn:
        """The model's sampled output (stop token included, if it stopped) as text and tool calls."""
        ...


class ChatTemplateProcessor(ABC):
    """The rendering common to every family: the chat template applied as text, then tokenized.

    A chunk the environment adds is found as TRL finds tool results' ids: render a dummy
    conversation with and without the new messages and keep the difference, cut after the end of
    the dummy assistant turn (the model's turn ends on its stop token; what the template writes
    after it, such as Qwen's newline, belongs to the chunk).

    Args:
        tokenizer: The model's tokenizer.
        chat_template: The template to render with; the tokenizer's own if None.
        template_kwargs: Extra variables of the template, e.g. `{"enable_thinking": False}`.
        stop_token_ids: Other ids that end the model's turn too: the model's EOS ids (a trainer's
            `eos_token_ids`), on which vLLM stops whatever it is asked. A turn that ends on one
            is read without it, as one ending on the template's own end of turn.

    A family's subclass names `end_of_turn`, the text that ends an assistant turn in its template
    (its stop token), and implements `read`.
    """

    end_of_turn: ClassVar[str]

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        stop_token_ids: Sequence[int] = (),
    ):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        stop = tokenizer.convert_tokens_to_ids(self.end_of_turn)
        if not isinstance(stop, int) or stop == tokenizer.unk_token_id:
            raise ConfigError(
                f"the tokenizer has no token {self.end_of_turn!r}, which ends an assistant turn in this template"
            )
        self.stop_token_ids = list(dict.fromkeys([stop, *stop_token_ids]))  # the template's own first

    def render(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool = False
    ) -> str:
        """The template's text for `messages` (what a token-exact sequence must decode to)."""
        rendered = self.tokenizer.apply_chat_template(
            messages,
            tools=list(tools) if tools else None,
            chat_template=self.chat_template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.template_kwargs,
        )
        assert isinstance(rendered, str)  # tokenize=False: the text (transformers types every form)
        return rendered

    def render_prompt(self, messages: list[Message], tools: list[dict[str, Any]]) -> list[int]:
        return self._encode(self.render(messages, tools=tools, add_generation_prompt=True))

    def render_env_turn(self, messages: list[Message]) -> list[int]:
        if not messages:
            raise ConfigError("an environment turn needs at least one message")
        name = next((m["name"] for m in messages if m["role"] == "tool"), None)
        dummy: list[Message] = [{"role": "user", "content": "dummy"}]
        if name is None:
            dummy.append({"role": "assistant", "content": "dummy"})
        else:
            dummy.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {}}}],
                }
            )
        before = self.render(dummy)
        after = self.render(dummy + messages, add_generation_prompt=True)
        cut = before.rfind(self.end_of_turn)
        if cut < 0 or not after.startswith(before[: cut + len(self.end_of_turn)]):
            raise ConfigError(
                "the chat template does not render a conversation as a prefix of its continuation, so "
                "tool results cannot be appended token-exact; render with a prefix-preserving template "
                "(TRL's get_training_chat_template gives one for the families it knows)"
            )
        return self._encode(after[cut + len(self.end_of_turn) :])

    def parse(self, completion_ids: list[int]) -> Turn:
        ids = completion_ids[:-1] if completion_ids and completion_ids[-1] in self.stop_token_ids else completion_ids
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        assert isinstance(text, str)  # one sequence of ids decodes to one text
        turn = self.read(text)
        if turn.tool_calls and not self._renders_back(turn):
            turn = replace(turn, verbatim=True)
        return turn

    @abstractmethod
    def read(self, text: str) -> Turn:
        """The family's reading of a sampled turn's text (stop token excluded) into content and calls."""

    def _renders_back(self, turn: Turn) -> bool:
        """Whether the template writes the turn's structured message exactly as it was sampled."""
        dummy: list[Message] = [{"role": "user", "content": "dummy"}]
        prompt = self.render(dummy, add_generation_prompt=True)
        return self.render([*dummy, turn.message()]).startswith(prompt + turn.text + self.end_of_turn)

    def _encode(self, text: str) -> list[int]:
        # The template writes its special tokens as text: encoding finds them as added tokens, and
        # adds no BOS of its own (a template that wants one writes it).
        return self.tokenizer.encode(text, add_special_tokens=False)


_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class HermesProcessor(ChatTemplateProcessor):
    """Qwen2.5 / Qwen3 (Hermes-style) tool calls: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`.

    Args:
        tokenizer: The model's tokenizer.
        chat_template: The template to render with. For Qwen3 pass the prefix-preserving one TRL
            trains with (`HermesProcessor.for_trainer` picks it), since the original drops earlier
            turns' thinking and so cannot be appended to.
        template_kwargs: Template variables, e.g. `{"enable_thinking": False}`.
    """

    end_of_turn = "<|im_end|>"

    @classmethod
    def for_trainer(
        cls,
        tokenizer: PreTrainedTokenizerBase,
        template_kwargs: dict[str, Any] | None = None,
        stop_token_ids: Sequence[int] = (),
    ) -> HermesProcessor:
        """A processor that renders with the template `GRPOTrainer` renders with for this tokenizer;
        `stop_token_ids`: the model's other EOS ids (`trainer.eos_token_ids`)."""
        template = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
        return cls(tokenizer, chat_template=template, template_kwargs=template_kwargs, stop_token_ids=stop_token_ids)

    def read(self, text: str) -> Turn:
        calls = [_json_call(body, arguments_key="arguments") for body in _HERMES_CALL.findall(text)]
        content = text.split("<tool_call>")[0] if calls else text
        # The template writes the content, then a newline before the first call.
        return Turn(text=text, content=content.removesuffix("\n") if calls else content, tool_calls=calls)


class Llama3JsonProcessor(ChatTemplateProcessor):
    """Llama 3.1 / 3.2 JSON tool calls: the whole reply is `{"name": ..., "parameters": {...}}`
    (optionally after `<|python_tag|>`); one call per turn, results in the `ipython` role."""

    end_of_turn = "<|eot_id|>"

    def read(self, text: str) -> Turn:
        body = text.strip().removeprefix("<|python_tag|>").strip()
        if not body.startswith("{"):
            return Turn(text=text, content=text)
        return Turn(text=text, content="", tool_calls=[_json_call(body, arguments_key="parameters")])


def _json_call(body: str, *, arguments_key: str) -> ToolCall:
    """A call written as `{"name": ..., "<arguments_key>": {...}}`; `arguments` is accepted too."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError as error:
        return ToolCall(name="", error=f"the tool call is not valid JSON ({error}): {body[:200]}")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCall(name="", error=f'a tool call is a JSON object with a "name": {body[:200]}')
    arguments = call.get(arguments_key, call.get("arguments", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        return ToolCall(
            name=call["name"], error=f"the arguments of {call['name']} are not a JSON object: {arguments!r}"
        )
    return ToolCall(name=call["name"], arguments=arguments)
