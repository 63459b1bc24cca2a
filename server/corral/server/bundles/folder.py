"""corral's own bundle folder (the `corral` format): read into typed data, collecting every
problem instead of stopping at one.

The format is described in docs/bundle-format.md. `load_corral` never raises for a broken
bundle: it returns what it could read and the list of problems, each naming its file and the
fix, so `corral check` can print them all at once. `formats.load_bundle` picks this format for
a folder with any of its files.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from corral.server.bundles.format import (
    CommandVerifier,
    EnvConfig,
    EvalConfig,
    Manifest,
    ServeDefaults,
    Task,
)
from corral.server.bundles.model import RESERVED_SPLIT, TRAIN_SPLIT, BundleEnv, LoadedBundle
from corral.server.bundles.problems import Problem, file_name, merge_shared

ConfigT = TypeVar("ConfigT", bound=BaseModel)
MARKS = ("bundle.toml", "envs", "tasks", "tasks.jsonl")  # any one makes a folder corral's own


class CorralFormat:
    """corral's own bundle folder: bundle.toml, envs/, tasks/ (or tasks.jsonl), evals/, verifiers/."""

    name = "corral"
    looks_for = "bundle.toml, envs/ or tasks/ (corral init NAME writes one)"

    def recognises(self, folder: Path) -> bool:
        return any((folder / mark).exists() for mark in MARKS)

    def load(self, folder: Path, *, network: str | None) -> LoadedBundle:
        return load_corral(folder)  # its envs say their own network: no policy to apply


def load_corral(root: Path) -> LoadedBundle:
    """Read corral's bundle folder at `root`; `bundle.problems` lists what is wrong (empty when clean)."""
    problems: list[Problem] = []
    manifest = _load_manifest(root, problems)
    envs = _load_envs(root, problems)
    verifiers = {path.stem: path for path in sorted((root / "verifiers").glob("[!_]*.py"))}
    command_verifiers = _load_command_verifiers(root, set(verifiers), problems)
    # A command verifier whose TOML is broken is reported once, not again by every task using it.
    verifier_names = {path.stem for path in (root / "verifiers").glob("[!_]*.*") if path.suffix in (".py", ".toml")}
    tasks = _load_tasks(root, manifest.defaults, problems)
    for task in tasks.values():
        _check_task_refs(task, envs, verifier_names, problems)
        _check_command_files(root, task, command_verifiers, problems)
    evals = _load_evals(root, tasks, problems)
    train = evals.pop(TRAIN_SPLIT) if TRAIN_SPLIT in evals else _unlisted(tasks, evals)
    splits = {RESERVED_SPLIT: list(tasks.values()), TRAIN_SPLIT: train, **evals}
    readme_path = root / "README.md"
    readme = readme_path.read_text() if readme_path.is_file() else ""
    return LoadedBundle(
        root, manifest, readme, envs, tasks, splits, verifiers, merge_shared(problems), command_verifiers
    )


def _read_toml(root: Path, path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        problems.append(Problem(file_name(root, path), f"not valid TOML: {error}; fix the syntax"))
        return None


def _validation_problems(root: Path, path: Path, error: ValidationError, what: str) -> list[Problem]:
    found = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or what
        if item["type"] == "extra_forbidden":
            message = f"unknown key {where!r}; remove it (see docs/bundle-format.md for the keys of {what})"
        elif item["type"] == "missing":
            message = f"{where!r} is missing; add it to {what}"
        else:
            message = f"{where!r}: {item['msg']} (got {item.get('input')!r})"
        found.append(Problem(file_name(root, path), message))
    return found


def _read_config(root: Path, path: Path, model: type[ConfigT], what: str, problems: list[Problem]) -> ConfigT | None:
    """The TOML file at `path` validated as `model`; None (with its problems noted) when it is not."""
    data = _read_toml(root, path, problems)
    if data is None:
        return None
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problems.extend(_validation_problems(root, path, error, what))
        return None


def _load_manifest(root: Path, problems: list[Problem]) -> Manifest:
    path = root / "bundle.toml"
    fallback = Manifest(name=re.sub(r"[^A-Za-z0-9_.-]", "-", root.name) or "bundle")
    if not path.is_file():
        problems.append(Problem(file_name(root, path), 'missing; create it with at least name = "..."'))
        return fallback
    data = _read_toml(root, path, problems)
    if data is None:
        return fallback
    try:
        return Manifest.model_validate(data)
    except ValidationError as error:
        problems.extend(_validation_problems(root, path, error, "bundle.toml"))
        # Keep the parts that are fine, so one stray key does not make every task that relies
        # on [defaults] (or on [serve] reward) report a problem of its own.
        salvaged: dict[str, Any] = {}
        if isinstance(data.get("defaults"), dict):
            salvaged["defaults"] = data["defaults"]
        try:
            salvaged["serve"] = ServeDefaults.model_validate(data.get("serve", {}))
        except ValidationError:
            pass
        return fallback.model_copy(update=salvaged)


def _load_envs(root: Path, problems: list[Problem]) -> dict[str, BundleEnv]:
    envs: dict[str, BundleEnv] = {}
    folders = sorted(p for p in (root / "envs").glob("*") if p.is_dir() and not p.name.startswith((".", "_")))
    if not folders:
        problems.append(Problem(file_name(root, root / "envs"), "no env folders; add envs/<name>/env.toml"))
    for folder in folders:
        path = folder / "env.toml"
        if not path.is_file():
            problems.append(Problem(file_name(root, path), 'missing; add it with entry = "module:Class"'))
            continue
        config = _read_config(root, path, EnvConfig, "env.toml", problems)
        if config is None:
            continue
        if (config.entry is None) == (config.command is None):
            problems.append(
                Problem(file_name(root, path), 'set exactly one of entry = "module:Class" or command = [...]')
            )
            continue
        if config.entry:
            module = config.entry.split(":")[0]
            module_path = folder / (module.replace(".", "/") + ".py")
            if not module_path.is_file() and not (folder / module.replace(".", "/") / "__init__.py").is_file():
                problems.append(
                    Problem(
                        file_name(root, path),
                        f"entry module {module!r} not found in {folder.name}/; add {module_path.name} or fix entry",
                    )
                )
        envs[folder.name] = BundleEnv(folder.name, folder, config)
    return envs


def _load_tasks(root: Path, defaults: dict[str, Any], problems: list[Problem]) -> dict[str, Task]:
    tasks: dict[str, Task] = {}
    seen_in: dict[str, str] = {}

    def add(raw: Any, where: str, default_id: str | None) -> None:
        if not isinstance(raw, dict):
            problems.append(Problem(where, "a task must be a JSON object"))
            return
        data = {**defaults, **raw}
        if default_id is not None:
            data.setdefault("id", default_id)
        try:
            task = Task.model_validate(data)
        except ValidationError as error:
            problems.extend(Problem(where, p.message) for p in _validation_problems(root, root, error, "the task"))
            return
        if task.id in tasks:
            problems.append(
                Problem(where, f"task id {task.id!r} is already used in {seen_in[task.id]}; give each task its own id")
            )
            return
        tasks[task.id] = task
        seen_in[task.id] = where

    jsonl = root / "tasks.jsonl"
    if jsonl.is_file():
        for number, line in enumerate(jsonl.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{file_name(root, jsonl)}:{number}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as error:
                problems.append(Problem(where, f"not valid JSON: {error.msg} at column {error.colno}"))
                continue
            add(raw, where, None)
    for path in sorted((root / "tasks").glob("*.json")):
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            problems.append(Problem(file_name(root, path), f"not valid JSON: {error.msg} at line {error.lineno}"))
            continue
        add(raw, file_name(root, path), path.stem)
    if not tasks and not any(
        p.file.startswith((file_name(root, jsonl), file_name(root, root / "tasks"))) for p in problems
    ):
        problems.append(Problem(file_name(root, root / "tasks"), "no tasks; add tasks/<id>.json or tasks.jsonl"))
    return tasks


def _check_task_refs(task: Task, envs: dict[str, BundleEnv], verifier_names: set[str], problems: list[Problem]) -> None:
    where = f"task {task.id}"
    if task.env not in envs:
        known = ", ".join(envs) or "none"
        problems.append(Problem(where, f"env {task.env!r} is not a folder under envs/ (envs: {known}); fix 'env'"))
    for score_id, verifier in task.verifiers.items():
        if verifier not in verifier_names:
            known = ", ".join(sorted(verifier_names)) or "none"
            problems.append(
                Problem(
                    where,
                    (
                        f"score {score_id!r} names verifier {verifier!r}, but verifiers/{verifier}.py does not exist, "
                        f"nor verifiers/{verifier}.toml (verifiers: {known})"
                    ),
                )
            )


# `{files}` and `{task_id}` are the placeholders; `${VAR}` (a shell's) is left alone.
_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_]\w*)\}")


def _load_command_verifiers(root: Path, python_names: set[str], problems: list[Problem]) -> dict[str, CommandVerifier]:
    """Every verifiers/<name>.toml that is fine; each one that is not adds its problems."""
    loaded: dict[str, CommandVerifier] = {}
    for path in sorted((root / "verifiers").glob("[!_]*.toml")):
        where = file_name(root, path)
        if path.stem in python_names:
            problems.append(Problem(where, f"verifiers/{path.stem}.py has the same name; rename one of them"))
            continue
        config = _read_config(root, path, CommandVerifier, "a command verifier", problems)
        if config is None:
            continue
        found = _command_verifier_problems(config)
        problems.extend(Problem(where, message) for message in found)
        if not found:
            loaded[path.stem] = config
    return loaded


def _command_verifier_problems(config: CommandVerifier) -> list[str]:
    """What is wrong with a command verifier that parsed: placeholders and paths."""
    found = []
    for what, parts, allowed in (
        ("command", config.command, "{files} and {task_id}"),
        ("files", config.files, "{task_id}"),
    ):
        for part in parts:
            for name in _PLACEHOLDER.findall(part):
                if f"{{{name}}}" not in allowed:
                    found.append(f"{what} has an unknown placeholder {{{name}}}; it may use {allowed}")
    for entry in config.files:
        if Path(entry).is_absolute() or ".." in Path(entry).parts:
            found.append(f"files entry {entry!r} is not inside the bundle; give a path relative to the bundle folder")
    if not found and config.files and not any("{files}" in part for part in config.command):
        found.append("files are copied in, but command never names them; use {files} (the folder they are in)")
    return found


def _check_command_files(
    root: Path, task: Task, command_verifiers: dict[str, CommandVerifier], problems: list[Problem]
) -> None:
    """Every file or folder a task's command verifiers copy in must exist for that task."""
    for name in dict.fromkeys(task.verifiers.values()):
        config = command_verifiers.get(name)
        for entry in config.files_for(task.id) if config else ():
            if not (root / entry).exists():
                problems.append(
                    Problem(
                        f"task {task.id}",
                        f"verifier {name} copies {entry!r} into the sandbox, but {file_name(root, root / entry)} does not exist; add it",
                    )
                )


def _unlisted(tasks: dict[str, Task], evals: dict[str, list[Task]]) -> list[Task]:
    """The `train` split when no evals/train.toml names it: every task in no eval split."""
    listed = {task.id for split in evals.values() for task in split}
    return [task for task in tasks.values() if task.id not in listed]


def _load_evals(root: Path, tasks: dict[str, Task], problems: list[Problem]) -> dict[str, list[Task]]:
    """Every evals/<split>.toml's tasks, evals/train.toml's included."""
    splits: dict[str, list[Task]] = {}
    for path in sorted((root / "evals").glob("*.toml")):
        where = file_name(root, path)
        if path.stem == RESERVED_SPLIT:
            problems.append(Problem(where, "the split 'all' is every task of the bundle; rename this eval"))
            continue
        config = _read_config(root, path, EvalConfig, "an eval file", problems)
        if config is None:
            continue
        unknown = [task_id for task_id in config.tasks if task_id not in tasks]
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            problems.append(Problem(where, f"{len(unknown)} task id(s) not in the bundle: {shown}; fix or remove them"))
        duplicates = sorted(task_id for task_id, n in Counter(config.tasks).items() if n > 1)
        if duplicates:
            problems.append(Problem(where, f"task(s) listed twice: {', '.join(duplicates[:5])}; list each once"))
        splits[path.stem] = [tasks[t] for t in config.tasks if t in tasks]
    return splits
