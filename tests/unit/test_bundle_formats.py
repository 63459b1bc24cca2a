"""Bundle formats are plug-ins: a format recognises its folders and reads them into the one bundle
model (formats.py). A third one, here a folder holding one tasks.csv, is a class listed in
FORMATS: loaded, checked and served with no change to the core."""

from __future__ import annotations

import asyncio
import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.sandboxes import Sandbox, SandboxProvider
from corral.server import formats
from corral.server.bundles.format import EnvConfig, Manifest, Task
from corral.server.bundles.model import RESERVED_SPLIT, TRAIN_SPLIT, BundleEnv, LoadedBundle
from corral.server.bundles.problems import Problem
from corral.server.connection.base import EnvConnection
from corral.server.formats import load_bundle
from corral.server.serving.options import ServeOptions
from corral.server.serving.served import ServedBundle
from tests.conftest import FIXTURES

TOYBOX = FIXTURES / "toybox"


class CsvExtension:
    """What serving a tasks.csv needs beyond the model: here, only its own summary line, and a
    record of the provider it was handed (so the test sees that serving asked it)."""

    def __init__(self) -> None:
        self.wrapped: list[SandboxProvider] = []

    def wrap_provider(self, provider: SandboxProvider) -> SandboxProvider:
        self.wrapped.append(provider)
        return provider

    def connect(self, sandbox: Sandbox) -> EnvConnection | None:
        return None  # its env is toybox's process, spoken to on the sandbox's stdio

    def where(self, root: Path, parts: tuple[str, ...]) -> str | None:
        return "tasks.csv (its env is toybox's)" if parts[:1] == ("envs",) else None

    def summary(self, bundle: LoadedBundle, splits: str, tools: str) -> list[str]:
        return [f"{bundle.manifest.name}: {len(bundle.tasks)} rows of tasks.csv; splits {splits}; tools {tools}"]


class CsvFormat:
    """A folder holding one tasks.csv (id,target): each row a task of toybox's `toy` env, scored
    by its `said` verifier."""

    name = "csv"
    looks_for = "a tasks.csv"

    def recognises(self, folder: Path) -> bool:
        return (folder / "tasks.csv").is_file()

    def load(self, folder: Path, *, network: str | None) -> LoadedBundle:
        problems: list[Problem] = []
        tasks: dict[str, Task] = {}
        with (folder / "tasks.csv").open(newline="") as rows:
            for number, row in enumerate(csv.DictReader(rows), start=2):
                if not row.get("target"):
                    problems.append(Problem(f"tasks.csv:{number}", "no target; give each row one"))
                    continue
                tasks[row["id"]] = Task(
                    id=row["id"],
                    env="toy",
                    prompt=f"Say {row['target']}.",
                    args={"target": row["target"]},
                    verifiers={"said": "said"},
                )
        env = BundleEnv("toy", TOYBOX / "envs" / "toy", EnvConfig(entry="env:Toy", agent_shell=False))
        splits = {RESERVED_SPLIT: list(tasks.values()), TRAIN_SPLIT: list(tasks.values())}
        return LoadedBundle(
            folder,
            Manifest(name=folder.name),
            "",
            {"toy": env},
            tasks,
            splits,
            {"said": TOYBOX / "verifiers" / "said.py"},
            problems,
            extension=CsvExtension(),
        )


@pytest.fixture
def with_csv_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "FORMATS", [*formats.FORMATS, CsvFormat()])


def csv_folder(root: Path, rows: str = "id,target\nsay-plum,plum\nsay-fig,fig\n") -> Path:
    folder = root / "fruit"
    folder.mkdir()
    (folder / "tasks.csv").write_text(rows)
    return folder


def test_a_third_format_loads_through_load_bundle(tmp_path, with_csv_format):
    bundle = load_bundle(csv_folder(tmp_path))

    assert bundle.problems == []
    assert [(task.id, task.args) for task in bundle.splits["train"]] == [
        ("say-plum", {"target": "plum"}),
        ("say-fig", {"target": "fig"}),
    ]
    assert bundle.where("envs", "toy") == "tasks.csv (its env is toybox's)"  # the format names its files
    assert bundle.where("README.md") == "fruit/README.md"


@pytest.mark.bwrap
def test_a_third_format_is_checked_and_served_with_its_own_summary(tmp_path, with_csv_format):
    folder = csv_folder(tmp_path)

    result = CliRunner().invoke(app, ["check", str(folder), "--sandbox", "local"])

    assert result.exit_code == 0, result.output
    assert (
        result.output.splitlines()[0]
        == "fruit: 2 rows of tasks.csv; splits all (2), train (2); tools crash, end_turn, say, wait"
    )


def test_serving_asks_the_format_for_its_provider(tmp_path, with_csv_format):
    async def open_and_close() -> LoadedBundle:
        served = await ServedBundle.open(csv_folder(tmp_path), ServeOptions(sandbox="local"))
        await served.aclose()
        return served.bundle

    bundle = asyncio.run(open_and_close())

    assert isinstance(bundle.extension, CsvExtension) and len(bundle.extension.wrapped) == 1


def test_a_third_formats_problems_are_listed_by_corral_check(tmp_path, with_csv_format):
    folder = csv_folder(tmp_path, "id,target\nsay-plum,\n")

    result = CliRunner().invoke(app, ["check", str(folder), "--sandbox", "local"])

    assert result.exit_code == 1
    assert "tasks.csv:2: no target; give each row one" in result.output


def test_a_folder_no_format_recognises_names_the_formats_tried(tmp_path):
    (tmp_path / "notes.txt").write_text("not a bundle")

    (problem,) = load_bundle(tmp_path).problems

    assert problem.file == str(tmp_path.resolve())
    assert problem.message == (
        "no bundle format recognises this folder (tried harbor: task.toml or task.yaml, in the folder or in its "
        "subfolders; corral: bundle.toml, envs/ or tasks/ (corral init NAME writes one)); "
        "add what one of them looks for"
    )


def test_the_error_names_a_registered_format_too_and_corral_check_exits_1(tmp_path, with_csv_format):
    result = CliRunner().invoke(app, ["check", str(tmp_path), "--sandbox", "local"])

    assert result.exit_code == 1
    assert "no bundle format recognises this folder" in result.output
    assert "; csv: a tasks.csv)" in result.output


def test_a_folder_that_is_not_there_is_its_one_problem(tmp_path):
    (problem,) = load_bundle(tmp_path / "gone").problems

    assert problem.message == "no such folder; give the path of a bundle folder"


def test_any_of_corral_s_own_files_makes_a_folder_corral_s(tmp_path):
    (tmp_path / "tasks").mkdir()

    files = {problem.file for problem in load_bundle(tmp_path).problems}

    assert f"{tmp_path.name}/bundle.toml" in files  # read as corral's bundle, missing its bundle.toml
