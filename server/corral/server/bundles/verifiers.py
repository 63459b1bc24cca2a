"""Scoring an episode with a bundle's verifiers, of two kinds.

A Python verifier is `verifiers/<name>.py` with `verify(task: dict, report: dict) -> float | dict`.
It runs outside any sandbox and reads the env's report, never the agent's sandbox, so nothing
the agent does can forge it.

A command verifier is `verifiers/<name>.toml` (`bundle.CommandVerifier`): after the agent's
last turn the sandbox runs its command on a copy of what the agent left, with its files (a
task's tests) where only the verifier can write, none of the agent's processes running, and
the exit status read from outside (`Sandbox.verify`): 0 scores 1.0, anything else, a timeout
included, 0.0. The agent never sees the files: they arrive only once it can no longer act.
A Harbor task's tests (`RewardFileVerifier`) are one too, whose verdict is the reward file they
write (reward.json or reward.txt), read back by the sandbox from outside them.

Whether a verifier can score a recorded episode again (`corral rescore`): a Python verifier may
say so with `RESCORE = "stateless"` (the default: it reads only the task and the report, which
records keep), `"state"` (it needs the episode's final state, which they do not keep yet) or
`"no"`; a command verifier reads the sandbox's files, so it is "state".
"""

from __future__ import annotations

import ast
import asyncio
import functools
import hashlib
import importlib.util
import json
import math
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

from corral.errors import VerifierError
from corral.sandboxes import CommandResult, Sandbox
from corral.server.bundles.format import CommandVerifier, RewardFileVerifier

Verify = Callable[[dict[str, Any], dict[str, Any]], Any]
RescoreMode = Literal["stateless", "state", "no"]


def rescore_mode(path: Path) -> RescoreMode:
    """The `RESCORE = "..."` a Python verifier's module sets ("stateless" when none), read from its
    source without running it; VerifierError when it is not one of the three strings."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as error:
        raise VerifierError(f"{path}: not valid Python: {error}") from None
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "RESCORE" for target in statement.targets
        ):
            value = statement.value.value if isinstance(statement.value, ast.Constant) else None
            if value not in get_args(RescoreMode):
                raise VerifierError(
                    f'{path}: RESCORE = {ast.unparse(statement.value)} is not one of "stateless", "state", "no"; '
                    'set it to one of them as a plain string (or leave it out: "stateless")'
                )
            return cast(RescoreMode, value)
    return "stateless"


def verifier_digest(path: Path) -> str:
    """A verifier file's content digest, `sha256:<hex>`: what tells an old verifier from a new one."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def load_verifiers(paths: Mapping[str, Path]) -> dict[str, Verify]:
    """Import every verifier module once; raise VerifierError naming each one that fails."""
    loaded: dict[str, Verify] = {}
    for name, path in paths.items():
        module_name = f"corral_verifier_{abs(hash(path))}_{name}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # The verifier's folder on sys.path lets it import its private helpers (verifiers/_*.py).
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            raise VerifierError(f"{path}: importing it failed: {type(error).__name__}: {error}") from error
        finally:
            sys.path.remove(str(path.parent))
        verify = getattr(module, "verify", None)
        if not callable(verify):
            raise VerifierError(f"{path}: defines no function verify(task, report); add one")
        loaded[name] = verify
    return loaded


def score_episode(
    task: dict[str, Any], report: dict[str, Any], verifiers: Mapping[str, str], loaded: Mapping[str, Verify]
) -> dict[str, float]:
    """Every score of an episode: `{score_id: value}`, or `{score_id/key: value}` for dicts."""
    scores: dict[str, float] = {}
    for score_id, name in verifiers.items():
        try:
            result = loaded[name](task, report)
        except Exception as error:
            raise VerifierError(
                f"verifier {name} raised {type(error).__name__}: {error}{_raised_at(error, loaded[name])}"
            ) from error
        if isinstance(result, Mapping):
            for key, value in result.items():
                scores[f"{score_id}/{key}"] = _as_score(name, value)
        else:
            scores[score_id] = _as_score(name, result)
    return scores


def _raised_at(error: Exception, verify: Verify) -> str:
    """Where in the bundle's verifiers folder `error` was raised (the innermost line there, a
    helper's included): ` at verifiers/grade.py:12 (return report["score"])`, as full paths."""
    folder = Path(verify.__code__.co_filename).parent
    ours = [frame for frame in traceback.extract_tb(error.__traceback__) if Path(frame.filename).parent == folder]
    if not ours:
        return ""
    frame = ours[-1]
    return f" at {frame.filename}:{frame.lineno}" + (f" ({frame.line.strip()})" if frame.line else "")


def _as_score(name: str, value: Any) -> float:
    score = _finite(value)
    if score is None:
        raise VerifierError(f"verifier {name} returned {repr(value)[:200]}; return a finite number (or a dict of them)")
    return score


OUTPUT_TAIL_CHARS = 2000  # what the final observation keeps of a command's output


@dataclass(frozen=True)
class CommandScore:
    """A command verifier's verdict: the score of its exit status, or a reward file's scores,
    named as the file names them; and the end of its output (for whoever debugs a 0)."""

    scores: float | dict[str, float]
    output_tail: str

    def scores_for(self, score_id: str) -> dict[str, float]:
        """The episode's scores from this verifier, which the task names `score_id`."""
        return dict(self.scores) if isinstance(self.scores, dict) else {score_id: self.scores}


def command_files(root: Path, config: CommandVerifier, task_id: str) -> dict[str, bytes]:
    """The files a command verifier copies in for `task_id`, by their path in the copy.

    A folder entry contributes its contents, a file entry itself, both at the top of the copy:
    `["tests/run_tests.py", "tests/{task_id}"]` gives `run_tests.py` beside the task's tests.
    """
    files: dict[str, bytes] = {}
    for entry in config.files_for(task_id):
        path = root / entry
        if path.is_file():
            files[path.name] = path.read_bytes()
        elif path.is_dir():
            for item in sorted(path.rglob("*")):
                if item.is_file() and "__pycache__" not in item.parts:
                    files[item.relative_to(path).as_posix()] = item.read_bytes()
        else:
            raise VerifierError(f"{path} does not exist; the command verifier copies it for task {task_id}")
    return files


async def run_command_verifier(
    sandbox: Sandbox, root: Path, name: str, config: CommandVerifier, task_id: str
) -> CommandScore:
    """Run the verifier's command on what the agent left in `sandbox`, and score its exit."""
    files = await asyncio.to_thread(command_files, root, config, task_id)  # disk reads, off the loop
    result = await sandbox.verify(
        files, functools.partial(config.command_for, task_id), timeout_s=config.timeout_s, **config.placement()
    )
    if isinstance(config, RewardFileVerifier):
        return reward_file_score(name, config, result)
    if result.exit_code is None:
        verdict = f"[verifier {name}: timed out after {config.timeout_s:g}s; scored 0]"
    else:
        verdict = f"[verifier {name}: exit status {result.exit_code}; scored {1 if result.exit_code == 0 else 0}]"
    return CommandScore(1.0 if result.exit_code == 0 else 0.0, _with_verdict(result.output, verdict))


def reward_file_score(name: str, config: RewardFileVerifier, result: CommandResult) -> CommandScore:
    """Scores from the reward file the command wrote, read as Harbor reads it: reward.json (a
    dict of finite numbers; it wins) or reward.txt (one number, the score `reward`). A command
    that timed out, or wrote neither file or one that does not parse, scores `reward` 0."""
    json_path, text_path = config.reward_files
    rewards, why = None, "it wrote no reward.json nor reward.txt"
    if result.exit_code is None:
        why = f"it timed out after {config.timeout_s:g}s"
    elif json_path in result.results:
        rewards, why = _parse_reward_json(result.results[json_path])
    elif text_path in result.results:
        rewards, why = _parse_reward_text(result.results[text_path])
    if rewards is None:
        rewards = {"reward": 0.0}
        verdict = f"[verifier {name}: exit status {result.exit_code}; {why}; scored 0]"
    else:
        shown = ", ".join(f"{key}={value:g}" for key, value in rewards.items())
        verdict = f"[verifier {name}: exit status {result.exit_code}; {why}: {shown}]"
    return CommandScore(rewards, _with_verdict(result.output, verdict))


def _with_verdict(output: str, verdict: str) -> str:
    """The end of a command's output with the verdict on a last line: OUTPUT_TAIL_CHARS in all."""
    tail = output.rstrip("\n")[-(OUTPUT_TAIL_CHARS - len(verdict) - 1) :]
    return f"{tail}\n{verdict}" if tail else verdict


# The reward files come out of the sandbox, written by whatever ran there: parsing them never
# raises (a nesting too deep to parse, a number too large for a float), malformed is a 0.


def _parse_reward_json(data: bytes) -> tuple[dict[str, float] | None, str]:
    try:
        loaded = json.loads(data)
    except (ValueError, RecursionError):
        return None, "its reward.json is not JSON that can be read"
    loaded = loaded if isinstance(loaded, dict) else {"reward": loaded}
    if not loaded:
        return None, "its reward.json is an empty object"
    finite = {str(key): _finite(value) for key, value in loaded.items()}
    bad = [key for key, value in finite.items() if value is None]
    if bad:
        return None, f"its reward.json holds values that are not finite numbers ({', '.join(bad)[:200]})"
    return {key: value for key, value in finite.items() if value is not None}, "reward.json"


def _parse_reward_text(data: bytes) -> tuple[dict[str, float] | None, str]:
    try:
        value = float(data.decode().strip())
    except (UnicodeDecodeError, ValueError):
        return None, f"its reward.txt is not a number ({data[:40]!r})"
    if not math.isfinite(value):
        return None, f"its reward.txt is not a finite number ({value})"
    return {"reward": value}, "reward.txt"


def _finite(value: Any) -> float | None:
    """`value` as a float when it is a finite number (not a bool); else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
