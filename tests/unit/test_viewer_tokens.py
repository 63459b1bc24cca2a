"""The episode page's tokens: each id's text with `corral view --tokenizer`, escaped whatever the
model or env made of it, decoded once per distinct id, and transformers imported only when asked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.cli.viewer.tokens import TokenText, token_chips
from corral.protocol.record_store import RecordWriter
from corral.protocol.records import RolloutRecord

HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "' onmouseover='alert(1)", "&lt;b&gt;", " \n"]
# What a chip shows for each: the text itself, its spaces and newline as marks.
SHOWN = ["<script>alert(1)</script>", '"><img·src=x·onerror=alert(1)>', "'·onmouseover='alert(1)", "&lt;b&gt;", "·↵"]


class Chips(HTMLParser):
    """The tags and attributes a page fragment holds, and the text of each token chip."""

    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self._in_chip = False
        self.feed(fragment)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_chip = tag == "span" and "tok" in (dict(attrs).get("class") or "").split()
        if self._in_chip:
            self.texts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_chip = False

    def handle_data(self, data: str) -> None:
        if self._in_chip:
            self.texts[-1] += data


class Tokenizer:
    """A tokenizer whose ids decode to the texts given, counting what it was asked to decode."""

    def __init__(self, texts: list[str]) -> None:
        self.texts, self.decoded = texts, []

    def __len__(self) -> int:
        return len(self.texts)

    def batch_decode(self, batch: list[list[int]], clean_up_tokenization_spaces: bool) -> list[str]:
        self.decoded += [ids[0] for ids in batch]
        return ["".join(self.texts[i] for i in ids) for ids in batch]


def _rollout(ids: list[int]) -> RolloutRecord:
    return RolloutRecord(
        episode_id="e",
        task_id="t",
        completion_ids=ids,
        env_mask=[i % 2 for i in range(len(ids))],
        logprobs=[-0.5] * len(ids),
    )


def test_a_token_whose_text_is_markup_renders_as_text() -> None:
    chips = Chips(token_chips(_rollout(list(range(len(HOSTILE)))), TokenText(Tokenizer(HOSTILE))))
    assert chips.texts == SHOWN
    assert {tag for tag, _ in chips.tags} <= {"h2", "p", "span", "div", "br", "details", "summary"}
    assert {name for _, attrs in chips.tags for name in attrs} <= {"class", "id", "title"}
    titles = [attrs["title"] for tag, attrs in chips.tags if tag == "span" and attrs.get("title")]
    assert titles == [
        "id 0 · env token",
        "id 1 · logprob -0.500",
        "id 2 · env token",
        "id 3 · logprob -0.500",
        "id 4 · env token",
    ]


def test_the_prompt_s_ids_show_as_chips_of_their_own_escaped_too() -> None:
    rollout = _rollout([2, 3]).model_copy(update={"prompt_ids": [0, 1]})
    fragment = token_chips(rollout, TokenText(Tokenizer(HOSTILE)))
    chips = Chips(fragment)
    assert chips.texts == SHOWN[:4]
    spans = [attrs for tag, attrs in chips.tags if tag == "span" and attrs.get("title")]
    assert [(attrs["class"], attrs["title"]) for attrs in spans] == [
        ("tok prompt", "id 0 · prompt"),
        ("tok prompt", "id 1 · prompt"),
        ("tok env", "id 2 · env token"),
        ("tok sampled", "id 3 · logprob -0.500"),
    ]
    assert "2 prompt ids" in fragment


def test_each_distinct_id_is_decoded_once_across_pages() -> None:
    tokenizer = Tokenizer(["a", "b", "c"])
    text = TokenText(tokenizer)
    first = Chips(token_chips(_rollout([0, 1, 0, 1, 0, 99]), text))
    second = Chips(token_chips(_rollout([1, 2, 2, 0]), text))
    assert first.texts == ["a", "b", "a", "b", "a", "⟨not in the tokenizer⟩"]
    assert second.texts == ["b", "c", "c", "a"]
    assert sorted(tokenizer.decoded) == [0, 1, 2]


def test_without_a_tokenizer_the_ids_show_and_a_line_names_the_option() -> None:
    fragment = token_chips(_rollout([7, 8]), None)
    assert Chips(fragment).texts == ["7", "8"]
    assert "--tokenizer" in fragment


def _records(folder: Path) -> Path:
    writer = RecordWriter(folder, "rollouts", run="run-a")
    writer.write(_rollout([0, 1]).model_copy(update={"run": "run-a", "step": 0, "group": 0, "group_index": 0}))
    writer.close()
    return folder


@pytest.mark.slow  # the viewer in a fresh interpreter
def test_the_viewer_imports_no_transformers_without_a_tokenizer(tmp_path: Path) -> None:
    code = (
        "import sys; from fastapi.testclient import TestClient; from corral.cli.viewer.app import create_viewer; "
        f"page = TestClient(create_viewer({str(_records(tmp_path))!r})).get('/episodes/e'); "
        "assert page.status_code == 200 and '--tokenizer' in page.text, page.text; "
        "assert 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_tokenizer_without_transformers_installed_is_one_line_naming_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # what importing it is on a host without it
    result = CliRunner().invoke(app, ["view", str(_records(tmp_path)), "--tokenizer", str(tmp_path)])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "pip install transformers" in result.stderr


def test_a_folder_with_no_tokenizer_is_one_line(tmp_path: Path) -> None:
    if os.environ.get("CI") != "true":  # CI installs transformers: there, its absence fails the test
        pytest.importorskip("transformers")
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        app, ["view", str(_records(tmp_path / "records")), "--tokenizer", str(tmp_path / "empty")]
    )
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"--tokenizer {tmp_path / 'empty'}" in result.stderr


@pytest.mark.parametrize("kept", [False, True], ids=["--tokenizer", "kept beside the records"])
def test_the_episode_page_shows_a_real_tokenizers_text_escaped(tmp_path: Path, kept: bool) -> None:
    if os.environ.get("CI") != "true":
        pytest.importorskip("transformers")
    from fastapi.testclient import TestClient
    from tokenizers import Tokenizer as Rust
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {text: i for i, text in enumerate(HOSTILE)}
    # A recipe's --record keeps it in the records folder, where the viewer finds it with no option.
    folder = tmp_path / "records" / "tokenizer" if kept else tmp_path / "tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=Rust(WordLevel(vocab, unk_token=HOSTILE[0]))).save_pretrained(folder)
    from corral.cli.viewer.app import create_viewer

    viewer = create_viewer(_records(tmp_path / "records"), tokenizer=None if kept else str(folder))
    page = TestClient(viewer).get("/episodes/e").text
    fragment = page[page.index("<h2>Tokens</h2>") : page.index("</body>")]
    assert Chips(fragment).texts == SHOWN[:2]
    assert "<script>alert" not in page and "<img" not in page, json.dumps(page)


def test_an_environments_record_shows_its_place_and_says_the_trainer_kept_the_tokens(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from corral.cli.viewer.app import create_viewer

    writer = RecordWriter(tmp_path, "rollouts", run="run-a")  # as an AsyncGRPO environment writes it
    writer.write(RolloutRecord(episode_id="e", task_id="t", step=3, group=1, group_index=0, policy_version=3))
    writer.close()
    page = TestClient(create_viewer(tmp_path)).get("/episodes/e").text
    assert "member 0 · policy version 3" in re.sub("<[^>]+>", "", page)  # its step and group: the crumbs
    assert "id='no-tokens'" in page and "<h2>Tokens</h2>" not in page
