"""An episode's tokens as chips, one per id: its prompt's (folded), then its completion's, the
model's sampled ids apart from the env's, the logprob on hover, and with `corral view
--tokenizer` each token's text.

The text came from a model and an env: it is escaped like any other text on the page, and its
whitespace is shown as marks so that a token of spaces or a newline can be seen and hovered.
transformers is imported only when a tokenizer is asked for: an env host may not have it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from html import escape
from typing import Any

from corral.errors import ConfigError
from corral.protocol.records import RolloutRecord

_MARKS = {" ": "·", "\n": "↵", "\t": "⇥", "\r": "␍"}
_EMPTY = "∅"  # a token whose text is empty would be a chip too thin to see or hover


def visible(text: str) -> str:
    """`text` with whitespace and control characters made visible (not yet HTML-escaped)."""
    shown = "".join(_MARKS.get(c, c if c.isprintable() else f"\\u{ord(c):04x}") for c in text)
    return shown or _EMPTY


class TokenText:
    """Each id's text, decoded once per distinct id however many pages show it, and kept escaped."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._size = len(tokenizer)
        self._shown: dict[int, str] = {}
        self._lock = threading.Lock()  # pages render on several threads; the tokenizer decodes on one

    def html(self, ids: Sequence[int]) -> list[str]:
        """The escaped, visible text of each id (a record's id the tokenizer lacks says so)."""
        missing = sorted({i for i in ids if i not in self._shown})
        if missing:
            with self._lock:
                known = [i for i in missing if 0 <= i < self._size]
                texts = self._tokenizer.batch_decode([[i] for i in known], clean_up_tokenization_spaces=False)
                self._shown.update({i: escape(visible(t)) for i, t in zip(known, texts, strict=True)})
                self._shown.update({i: "⟨not in the tokenizer⟩" for i in missing if i not in self._shown})
        return [self._shown[i] for i in ids]


def load_tokenizer(name: str) -> TokenText:
    """`AutoTokenizer.from_pretrained(name)`, or a ConfigError of one line saying what to do."""
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise ConfigError(
            f"--tokenizer needs transformers, which is not installed here "
            f"(pip install transformers): {_one_line(error)}"
        ) from None
    try:
        return TokenText(AutoTokenizer.from_pretrained(name))
    except (OSError, ValueError, TypeError) as error:
        raise ConfigError(
            f"--tokenizer {name}: no tokenizer loads from it; give a tokenizer's folder "
            f"(one with tokenizer.json or tokenizer_config.json): {_one_line(error)}"
        ) from None


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def token_chips(rollout: RolloutRecord, text: TokenText | None) -> str:
    """The prompt's ids (folded), then the completion's as chips: blue sampled (logprob on hover),
    grey the env's."""
    ids = rollout.completion_ids
    chips = []
    for i, label, sampled, logprob in zip(ids, _labels(ids, text), rollout.env_mask, rollout.logprobs, strict=False):
        title = f"id {i} · logprob {logprob:.3f}" if sampled else f"id {i} · env token"
        chips.append(_chip("sampled" if sampled else "env", title, label, text))
    prompt = "".join(
        _chip("prompt", f"id {i} · prompt", label, text)
        for i, label in zip(rollout.prompt_ids, _labels(rollout.prompt_ids, text), strict=True)
    )
    hint = (
        ""
        if text is not None
        else ("<p id='token-hint'>Ids only: <code>corral view ... --tokenizer PATH</code> shows each token's text.</p>")
    )
    return (
        f"<h2>Tokens</h2><details id='prompt-tokens'><summary>{len(rollout.prompt_ids)} prompt ids</summary>"
        f"<div>{prompt}</div></details><p><span id='sampled'>{rollout.sampled}</span> of "
        f"{len(ids)} completion ids sampled by the model (blue; id and logprob on hover), the rest "
        f"rendered from the env's answers (grey){'; truncated: ' + escape(rollout.truncated) if rollout.truncated else ''}"
        f"</p>{hint}<div id='tokens'>{''.join(chips)}</div>"
    )


def _labels(ids: Sequence[int], text: TokenText | None) -> list[str]:
    return text.html(ids) if text is not None else [str(i) for i in ids]


def _chip(kind: str, title: str, label: str, text: TokenText | None) -> str:
    chip = f"<span class='tok {kind}' title='{title}'>{label}</span>"
    # the newline a chip shows also breaks the line, so it reads like the text
    return chip + "<br>" if text is not None and "↵" in label else chip
