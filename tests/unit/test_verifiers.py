"""Python verifiers, loaded and run as the verifier pool's workers run them: what each may
return, and the errors that say what to fix."""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path

import pytest

from corral.errors import VerifierError
from corral.sandboxes import CommandResult
from corral.server.bundles.format import CommandVerifier, RewardFileVerifier
from corral.server.bundles.verifiers import (
    OUTPUT_TAIL_CHARS,
    command_files,
    load_verifiers,
    reward_file_score,
    run_command_verifier,
    score_episode,
)


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(source)
    return path


def test_a_number_is_the_score_and_a_dict_gives_one_score_per_key(tmp_path):
    loaded = load_verifiers(
        {
            "exact": write(
                tmp_path, "exact", "def verify(task, report):\n    return int(report['word'] == task['word'])\n"
            ),
            "parts": write(tmp_path, "parts", "def verify(task, report):\n    return {'said': 1, 'short': 0.25}\n"),
        }
    )
    scores = score_episode({"word": "apple"}, {"word": "apple"}, {"grade": "exact", "style": "parts"}, loaded)
    assert scores == {"grade": 1.0, "style/said": 1.0, "style/short": 0.25}
    assert all(type(score) is float for score in scores.values())
    assert score_episode({"word": "apple"}, {"word": "pear"}, {"grade": "exact"}, loaded) == {"grade": 0.0}


@pytest.mark.parametrize("returned", ["True", "'1'", "None", "math.nan", "math.inf", "{'ok': -math.inf}", "10 ** 400"])
def test_a_verifier_that_returns_no_finite_number_is_an_error_naming_it(tmp_path, returned):
    loaded = load_verifiers(
        {"odd": write(tmp_path, "odd", f"import math\ndef verify(task, report):\n    return {returned}\n")}
    )
    with pytest.raises(VerifierError, match=r"verifier odd returned .*; return a finite number \(or a dict of them\)"):
        score_episode({}, {}, {"grade": "odd"}, loaded)


def test_a_verifier_that_raises_is_an_error_with_its_exception_file_and_line(tmp_path):
    path = write(tmp_path, "broken", "def verify(task, report):\n    return report['missing']\n")
    loaded = load_verifiers({"broken": path})
    with pytest.raises(VerifierError) as raised:
        score_episode({}, {}, {"grade": "broken"}, loaded)
    assert str(raised.value) == f"verifier broken raised KeyError: 'missing' at {path}:2 (return report['missing'])"


def test_a_raise_in_a_verifiers_helper_names_the_helpers_line(tmp_path):
    helper = write(tmp_path, "_parse", "def count(report):\n    text = report['text']\n    return int(text)\n")
    loaded = load_verifiers(
        {
            "counted": write(
                tmp_path,
                "counted",
                "from _parse import count\ndef verify(task, report):\n    return count(report) == 3\n",
            )
        }
    )
    with pytest.raises(VerifierError) as raised:
        score_episode({}, {"text": "three"}, {"grade": "counted"}, loaded)
    assert str(raised.value) == (
        "verifier counted raised ValueError: invalid literal for int() with base 10: "
        f"'three' at {helper}:3 (return int(text))"
    )


def test_a_verifier_imports_its_private_helpers_from_its_folder_and_leaves_sys_path_as_it_was(tmp_path):
    write(tmp_path, "_words", "FRUIT = {'apple', 'pear'}\n")
    path = write(
        tmp_path, "fruit", "from _words import FRUIT\ndef verify(task, report):\n    return report['word'] in FRUIT\n"
    )
    before = list(sys.path)
    loaded = load_verifiers({"fruit": path})
    assert sys.path == before
    assert math.isclose(loaded["fruit"]({}, {"word": "pear"}), 1.0)


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("x = 1 / 0\n", "importing it failed: ZeroDivisionError: division by zero"),
        ("def check(task, report):\n    return 1.0\n", "defines no function verify(task, report); add one"),
        ("verify = 1.0\n", "defines no function verify(task, report); add one"),
    ],
)
def test_a_verifier_that_cannot_be_loaded_is_an_error_naming_its_file_and_the_fix(tmp_path, source, error):
    path = write(tmp_path, "bad", source)
    before = list(sys.path)
    with pytest.raises(VerifierError) as raised:
        load_verifiers({"bad": path})
    assert str(raised.value) == f"{path}: {error}"
    assert sys.path == before


def test_a_command_verifiers_output_keeps_its_end_and_the_verdict_within_the_limit():
    output = "".join(f"line {n}\n" for n in range(1000))
    score = reward_file_score(
        "tests",
        RewardFileVerifier(command=["true"], files=[], timeout_s=60),
        CommandResult(0, output, {"/logs/verifier/reward.txt": b"1"}),
    )
    assert len(score.output_tail) == OUTPUT_TAIL_CHARS
    kept, verdict = score.output_tail.rsplit("\n", 1)
    assert verdict == "[verifier tests: exit status 0; reward.txt: reward=1]"
    assert output.rstrip("\n").endswith(kept) and kept.endswith("line 999")


def test_a_command_verifier_copies_a_folders_files_and_a_file_leaving_out_pycache(tmp_path):
    (tmp_path / "tests" / "t1" / "data" / "__pycache__").mkdir(parents=True)
    (tmp_path / "tests" / "t1" / "test_it.py").write_text("a")
    (tmp_path / "tests" / "t1" / "data" / "case.txt").write_text("b")
    (tmp_path / "tests" / "t1" / "data" / "__pycache__" / "x.pyc").write_text("c")
    (tmp_path / "tests" / "run.py").write_text("d")
    config = CommandVerifier(command=["python3", "run.py"], files=["tests/run.py", "tests/{task_id}"])
    assert command_files(tmp_path, config, "t1") == {"run.py": b"d", "test_it.py": b"a", "data/case.txt": b"b"}
    with pytest.raises(VerifierError, match=r"tests/t2 does not exist; the command verifier copies it for task t2"):
        command_files(tmp_path, config, "t2")


class FinishedSandbox:
    """Stands in for a sandbox whose verification run ended as `result` (the providers' own
    verify is tested against each provider in tests/contract)."""

    def __init__(self, result: CommandResult):
        self.result = result
        self.ran: list[str] = []

    async def verify(self, files, command, *, timeout_s: float, **placement) -> CommandResult:
        self.ran = list(command("/verifier"))
        return self.result


@pytest.mark.parametrize(
    ("exit_code", "score", "verdict"),
    [
        (0, 1.0, "[verifier unit: exit status 0; scored 1]"),
        (3, 0.0, "[verifier unit: exit status 3; scored 0]"),
        (None, 0.0, "[verifier unit: timed out after 5s; scored 0]"),
    ],
)
def test_a_command_verifier_scores_its_exit_status_and_says_so_after_its_output(tmp_path, exit_code, score, verdict):
    (tmp_path / "run.sh").write_text("exit 0")
    config = CommandVerifier(command=["sh", "{files}/run.sh"], files=["run.sh"], timeout_s=5)
    sandbox = FinishedSandbox(CommandResult(exit_code, "2 passed\n"))
    checked = asyncio.run(run_command_verifier(sandbox, tmp_path, "unit", config, "t1"))
    assert (checked.scores_for("unit"), checked.output_tail) == ({"unit": score}, f"2 passed\n{verdict}")
    assert sandbox.ran == ["sh", "/verifier/run.sh"]


def test_a_verifiers_own_helper_wins_over_a_module_of_the_same_name_elsewhere(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write(elsewhere, "_words", "FRUIT = {'turnip'}\n")
    monkeypatch.syspath_prepend(str(elsewhere))
    monkeypatch.delitem(sys.modules, "_words", raising=False)
    write(tmp_path, "_words", "FRUIT = {'apple'}\n")
    path = write(
        tmp_path,
        "fruit",
        "from _words import FRUIT\ndef verify(task, report):\n    return float(report['word'] in FRUIT)\n",
    )
    loaded = load_verifiers({"fruit": path})
    monkeypatch.delitem(sys.modules, "_words", raising=False)
    assert score_episode({}, {"word": "apple"}, {"grade": "fruit"}, loaded) == {"grade": 1.0}


def test_a_reward_txt_that_is_no_number_is_quoted_in_the_verdict_up_to_40_bytes():
    score = reward_file_score(
        "tests",
        RewardFileVerifier(command=["true"], files=[], timeout_s=60),
        CommandResult(0, "", {"/logs/verifier/reward.txt": b"x" * 100}),
    )
    assert (
        score.output_tail
        == f"[verifier tests: exit status 0; its reward.txt is not a number ({b'x' * 40!r}); scored 0]"
    )


@pytest.mark.parametrize(
    ("written", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "its reward.json is not JSON that can be read"),  # too deep to parse
        (b'{"reward": 1' + b"0" * 400 + b"}", "its reward.json holds values that are not finite numbers (reward)"),
        (b'{"reward": NaN}', "its reward.json holds values that are not finite numbers (reward)"),
        (b'{"reward": 1e999}', "its reward.json holds values that are not finite numbers (reward)"),
        (b"\xff\xfe", "its reward.json is not JSON that can be read"),
    ],
)
def test_a_reward_json_shaped_to_break_its_reader_scores_0_and_never_raises(written, why):
    """The reward file comes out of the sandbox: whatever ran there wrote it, so no content may
    raise (an exception would end the episode as corral's failure instead of the agent's 0)."""
    score = reward_file_score(
        "tests",
        RewardFileVerifier(command=["true"], files=[], timeout_s=60),
        CommandResult(0, "", {"/logs/verifier/reward.json": written}),
    )
    assert score.scores == {"reward": 0.0} and f"{why}; scored 0]" in score.output_tail
