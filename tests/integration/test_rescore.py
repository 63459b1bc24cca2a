"""Re-scoring a run: `corral rescore DIR --bundle FIXED` scores recorded episodes again with a
fixed verifier, on the report each record kept, and writes the new scores beside the old.

A run of 20 codeword episodes is recorded once, under a verifier with a deliberate bug (it grades
the last submission, where the task says the first counts); each test re-scores a copy of it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.protocol.record_store import RESCORES, EpisodeStore, RecordWriter
from corral.protocol.records import REPORT_KEPT_BYTES, EpisodeRecord, RescoreRecord
from corral.server.bundles.verifiers import verifier_digest
from corral.server.serving.recording import EpisodeRecorder
from tests.conftest import BUNDLES, serving
from tests.wire import called, opened, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
CODEWORD = BUNDLES / "codeword"
EPISODES = 20
FIXED = (CODEWORD / "verifiers" / "grade.py").read_text()
WRONG = FIXED.replace('report["submitted"][:1]', 'report["submitted"][-1:]')  # the last submission, not the first
assert WRONG != FIXED


def codeword_copy(folder: Path, grade: str) -> Path:
    shutil.copytree(CODEWORD, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "verifiers" / "grade.py").write_text(grade)
    return folder


def should_change(index: int) -> bool:
    """Episode `index` submits wrong then right (0), right then wrong (1), or right only: the fix
    changes the first two kinds."""
    return index % 4 in (0, 1)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, int]]]:
    """A records folder of EPISODES episodes scored by the wrong verifier; {episode id: index}."""
    tmp = tmp_path_factory.mktemp("recorded")
    bundle, records = codeword_copy(tmp / "wrong", WRONG), tmp / "records"
    tasks = [json.loads(line) for line in (CODEWORD / "tasks.jsonl").read_text().splitlines()]
    by_id = {task["id"]: task["args"] for task in tasks}
    played: dict[str, int] = {}
    running = serving(bundle, record_dir=records)
    server = next(running)
    for index in range(EPISODES):
        task_id = f"codeword-{600 + index:04d}"
        args = by_id[task_id]
        right = args["numbers"][args["word"]]
        submissions = {0: [right + 1, right], 1: [right, right + 1]}.get(index % 4, [right])
        with ws(server) as socket:
            played[opened(socket, task_id=task_id).episode_id] = index
            called(socket, "lookup", word=args["word"])
            for number in submissions:
                called(socket, "submit", number=number)
            called(socket, "end_turn", response="")
    next(running, None)  # stops the server: its records are written
    yield records, played


def rescore(records: Path, bundle: Path, *options: str) -> str:
    result = CliRunner().invoke(app, ["rescore", str(records), "--bundle", str(bundle), *options])
    assert result.exit_code == 0, result.output
    return result.output


def rescores(records: Path) -> list[RescoreRecord]:
    return [RescoreRecord.model_validate_json(line) for path in records.glob(f"*/{RESCORES}") for line in path.open()]


def test_a_fixed_verifier_changes_exactly_the_rewards_it_should_and_the_old_scores_remain(
    recorded: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    source, played = recorded
    records = shutil.copytree(source, tmp_path / "records")
    fixed = codeword_copy(tmp_path / "fixed", FIXED)
    with EpisodeStore(records) as store:
        before = {episode_id: store.episode(episode_id) for episode_id in played}
        indexed = store.find()
    assert all(r.report is not None and set(r.report) == {"lookups", "submitted"} for r in before.values())
    wrong_digest = verifier_digest(source.parent / "wrong" / "verifiers" / "grade.py")
    assert all(r.verifier_digests == {"grade": wrong_digest} for r in before.values())

    output = rescore(records, fixed)

    assert f"{EPISODES} episodes: {EPISODES} re-scored (10 changed), 0 failed, 0 refused" in output
    new = {r.episode_id: r for r in rescores(records)}
    assert set(new) == set(played)
    changed = {episode_id for episode_id, r in new.items() if r.changed}
    assert changed == {episode_id for episode_id, index in played.items() if should_change(index)}
    for episode_id, r in new.items():
        wrong_then_right = played[episode_id] % 4 == 0
        assert (r.old_reward, r.reward) == ((1.0, 0.3) if wrong_then_right else (0.3, 1.0) if r.changed else (1.0, 1.0))
        assert (
            r.verifier_digests
            == {"grade": verifier_digest(fixed / "verifiers" / "grade.py")}
            != {"grade": wrong_digest}
        )
    with EpisodeStore(records) as store:  # the records are as they were: the old scores remain
        assert {episode_id: store.episode(episode_id) for episode_id in played} == before
        assert store.find() == indexed
    listing = CliRunner().invoke(app, ["episodes", str(records), "--limit", "100"]).output
    marked = {line.split()[2] for line in listing.splitlines() if line.rstrip().split()[-2:-1] == ["*"]}
    assert marked == changed, listing
    assert f"{EPISODES} re-scored by `corral rescore`, 10 with a changed reward (marked *)" in listing


def test_a_verifier_that_says_it_cannot_be_rerun_is_refused(
    recorded: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    records = shutil.copytree(recorded[0], tmp_path / "records")
    refusing = codeword_copy(tmp_path / "refusing", 'RESCORE = "no"\n' + FIXED)

    output = rescore(records, refusing)

    assert f"{EPISODES} episodes: 0 re-scored (0 changed), 0 failed, {EPISODES} refused" in output
    assert 'verifier grade declares RESCORE = "no"' in output
    assert all(r.status == "refused" and r.reward is None for r in rescores(records))


def test_a_command_verifier_is_refused_naming_why(tmp_path: Path) -> None:
    records = tmp_path / "records"
    writer = RecordWriter(records, "episodes")
    writer.write(EpisodeRecord(episode_id="e1", task_id="shellfix-clamp", cause="scored", status="scored", report={}))
    writer.close()

    output = rescore(records, BUNDLES / "shellfix")

    assert "1 episodes: 0 re-scored (0 changed), 0 failed, 1 refused" in output
    assert (
        "verifier tests is a command verifier: it needs the episode's final state, which records do not keep yet"
        in output
    )


def test_a_file_named_like_the_verifier_beside_the_records_or_in_the_working_folder_is_not_run(
    recorded: tuple[Path, dict[str, int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = shutil.copytree(recorded[0], tmp_path / "records")
    fixed = codeword_copy(tmp_path / "fixed", FIXED)
    ran = tmp_path / "the agent's verifier ran"
    forged = f"def verify(task, report):\n    open({str(ran)!r}, 'w').close()\n    return 1.0\n"
    work = tmp_path / "work"
    for folder in (work / "verifiers", *(run / "verifiers" for run in records.iterdir() if run.is_dir())):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "grade.py").write_text(forged)
        (folder.parent / "grade.py").write_text(forged)
    monkeypatch.chdir(work)

    output = rescore(records, fixed)

    assert "10 changed" in output  # the fixed verifier scored: the forged one would score 1.0 throughout
    assert not ran.exists()


def test_episodes_whose_record_cannot_be_scored_again_are_refused_each_saying_why(tmp_path: Path) -> None:
    records = tmp_path / "records"
    recorder = EpisodeRecorder(records, "codeword", {"grade": "sha256:old"})
    scored = {"task_id": "codeword-0600", "cause": "scored", "status": "scored"}
    recorder.record(EpisodeRecord(episode_id="unscored", task_id="codeword-0600", cause="env_died"), {})
    recorder.record(EpisodeRecord(episode_id="old", **scored), {"grade": "grade"})
    huge = {"lookups": ["x" * REPORT_KEPT_BYTES], "submitted": []}
    recorder.record(EpisodeRecord(episode_id="huge", report=huge, **scored), {"grade": "grade"})
    recorder.close()
    with EpisodeStore(records) as store:
        kept = store.episode("huge")
    assert kept.report is None and kept.verifier_digests == {"grade": "sha256:old"}
    assert kept.report_left_out is not None and f"past the {REPORT_KEPT_BYTES} a record keeps" in kept.report_left_out

    rescore(records, codeword_copy(tmp_path / "fixed", FIXED))

    reasons = {r.episode_id: (r.status, r.reason) for r in rescores(records)}
    assert reasons == {
        "unscored": (
            "refused",
            "the episode was not scored (it ended unscored: env_died), so no verifier gave its reward",
        ),
        "old": (
            "refused",
            "the record keeps no report of the env (it was recorded before records kept one, or the env gave none)",
        ),
        "huge": ("refused", kept.report_left_out),
    }
