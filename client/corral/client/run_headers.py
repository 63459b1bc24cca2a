"""A run's header, `DIR/<run>/run.json` beside its records (`RunHeader`): what the run is, written
when it starts and again when it ends; and the trainer's logged metrics, `DIR/<run>/metrics.ndjson`.
Readers take a folder without a header (written before headers existed, or by a writer that gave
none) as unlabelled."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pydantic import ValidationError

from corral.protocol.records import RunHeader

HEADER = "run.json"
METRICS = "metrics.ndjson"  # the trainer's logged values, an object a line (not .jsonl: no episode file)
TOKENIZER = "tokenizer"  # a records folder's own: the model's tokenizer, which `corral view` reads its ids with


def write_header(root: str | Path, header: RunHeader) -> None:
    """Writes the header into the run's folder, whole or not at all (a reader never sees half)."""
    folder = Path(root) / header.run
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{HEADER}.{os.getpid()}"
    partial.write_text(header.model_dump_json())
    partial.replace(folder / HEADER)


def end_header(root: str | Path, header: RunHeader) -> RunHeader:
    """The header with its end time set, written."""
    ended = header.model_copy(update={"ended_at": time.time()})
    write_header(root, ended)
    return ended


def read_header(folders: list[Path], run: str) -> RunHeader | None:
    """The run's header from the first of `folders` that holds one; None for an unlabelled run."""
    for folder in folders:
        path = folder / run / HEADER
        if path.is_file():
            try:
                return RunHeader.model_validate_json(path.read_text())
            except ValidationError:
                return None  # a header from a newer corral, or damaged: shown unlabelled
    return None


def read_metrics(folders: list[Path], run: str) -> dict[str, dict[int, float]]:
    """The trainer's logged values by name and step (the last logged at a step); empty when none
    was recorded. A line cut short by a killed writer is skipped."""
    found: dict[str, dict[int, float]] = {}
    for folder in folders:
        path = folder / run / METRICS
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    logged = json.loads(line)
                except json.JSONDecodeError:
                    continue
                step = logged.pop("step", None)
                for name, value in logged.items():
                    if isinstance(step, int) and isinstance(value, int | float):
                        found.setdefault(name, {})[step] = float(value)
            return found
    return found
