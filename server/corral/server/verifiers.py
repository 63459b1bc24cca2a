"""Loading a bundle's verifiers and scoring an episode with them, outside any sandbox.

A verifier is `verifiers/<name>.py` with `verify(task: dict, report: dict) -> float | dict`.
It reads the env's report, never the agent's sandbox, so nothing the agent does can forge it.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Verify = Callable[[dict[str, Any], dict[str, Any]], Any]


class VerifierError(RuntimeError):
    """A verifier could not be loaded, raised, or returned something that is not a score."""


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
            raise VerifierError(f"verifier {name} raised {type(error).__name__}: {error}") from error
        if isinstance(result, Mapping):
            for key, value in result.items():
                scores[f"{score_id}/{key}"] = _as_score(name, value)
        else:
            scores[score_id] = _as_score(name, result)
    return scores


def _as_score(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VerifierError(f"verifier {name} returned {value!r}; return a finite number (or a dict of them)")
    return float(value)
