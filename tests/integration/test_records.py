"""Episode records: `corral serve --record DIR` keeps every episode, `corral episodes DIR` reads
them back, and the exports turn them into training data.

A record holds every call in order with its arguments, answer or error, and timing; records are
flushed as they are written, so a server killed mid-run loses none that it had written, and a
restarted server adds a run beside the last; the index answers filters over a thousand episodes
without reading them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.client import Bundle
from corral.client.record_exports import conversation, rl_dataset, sft_dataset
from corral.protocol.record_store import EpisodeStore, RecordWriter
from corral.protocol.records import EpisodeRecord, RecordedCall, RolloutRecord
from tests.conftest import BUNDLES
from tests.wire import called, opened, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
CODEWORD = BUNDLES / "codeword"


def play_codeword(url: str, *, number_offset: int = 0, bad_call: bool = False) -> float | None:
    """Play the first eval task of the codeword bundle at `url`; its reward."""
    with Bundle(url, split="eval") as env:
        row = env.dataset[0]
        e = env.factory()
        e.reset(**row)
        answer = json.loads(e.lookup(word=row["prompt"][-1]["content"].split('"')[1]))
        if bad_call:
            e.submit(number="forty-two")  # refused: the tool wants an integer
        e.submit(number=answer["number"] + number_offset)
        return e.get_reward()


def test_an_episodes_record_holds_every_call_in_order_with_answers_errors_and_timing(serve, tmp_path: Path) -> None:
    server = serve(CODEWORD, record_dir=tmp_path / "records")

    began = time.monotonic()
    assert play_codeword(server.url, bad_call=True) == 1.0
    played_s = time.monotonic() - began  # the whole episode, reset to reward, took no longer
    server.stop()  # writes what is queued

    with EpisodeStore(tmp_path / "records") as store:
        (only,) = store.find()
        record = store.episode(only.episode_id)
    assert [c.tool for c in record.calls] == ["lookup", "submit", "submit", "end_turn"]
    lookup, refused, submitted, ended = record.calls
    assert lookup.arguments == {"word": record.prompt.split('"')[1]} and json.loads(lookup.result)["number"] > 0
    assert refused.arguments == {"number": "forty-two"} and refused.result is None
    assert refused.error is not None and refused.error.error_type == "invalid_args"
    assert submitted.result == json.dumps({"submitted": json.loads(lookup.result)["number"]}, separators=(",", ":"))
    assert ended.arguments == {"response": ""} and ended.result == "The episode has ended."
    assert all(
        0 <= c.started_s <= record.seconds["total"] and 0 <= c.seconds <= record.seconds["total"] for c in record.calls
    )
    assert [c.started_s for c in record.calls] == sorted(c.started_s for c in record.calls)
    assert (record.status, record.cause, record.reward, record.scores) == ("scored", "scored", 1.0, {"grade": 1.0})
    assert (record.bundle, record.split, record.sandbox, record.turns, record.tool_calls) == (
        "codeword",
        "eval",
        "local",
        1,
        3,
    )
    seconds = record.seconds  # the phases in order, each inside the episode's whole time
    assert 0 < seconds["start"] <= seconds["reset"] and 0 < seconds["tools"] and 0 < seconds["verify"]
    assert seconds["reset"] + seconds["tools"] + seconds["verify"] <= seconds["total"] <= played_s
    assert [t.name for t in record.tools] == ["lookup", "submit", "end_turn"]


def test_a_reset_naming_a_task_alone_records_the_split_the_task_belongs_to(serve, tmp_path: Path) -> None:
    server = serve(CODEWORD, record_dir=tmp_path / "records")
    played = {}
    for task_id in ("codeword-0600", "codeword-0001"):  # an eval task, then a train task, by id alone
        with ws(server) as socket:
            played[task_id] = opened(socket, task_id=task_id).episode_id
            called(socket, "end_turn", response="")
    server.stop()  # writes what is queued

    with EpisodeStore(tmp_path / "records") as store:
        splits = {task_id: store.episode(episode_id).split for task_id, episode_id in played.items()}
    assert splits == {"codeword-0600": "eval", "codeword-0001": "train"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(records: Path, port: int) -> subprocess.Popen:
    corral = Path(sys.executable).parent / "corral"
    process = subprocess.Popen(
        [str(corral), "serve", str(CODEWORD), "--sandbox", "local", "--port", str(port), "--record", str(records)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError("corral serve did not start")


def test_records_survive_a_killed_server_and_a_restart_adds_a_run(tmp_path: Path) -> None:
    records, port = tmp_path / "records", free_port()
    first = start_server(records, port)
    try:
        rewards = [play_codeword(f"http://127.0.0.1:{port}") for _ in range(2)]
        time.sleep(0.5)  # the episodes ended; their records are written off the server's loop
    finally:
        first.send_signal(signal.SIGKILL)  # no shutdown, no flush at exit
        first.wait()
    second = start_server(records, port)
    try:
        rewards.append(play_codeword(f"http://127.0.0.1:{port}", number_offset=1))
    finally:
        second.send_signal(signal.SIGINT)
        second.wait(timeout=30)

    with EpisodeStore(records) as store:
        runs = [run for run in store.runs() if run.kind == "episodes"]
        assert [run.records for run in runs] == [2, 1]
        recorded = list(store.records(store.find()))[::-1]  # oldest first
    assert rewards == [r.reward for r in recorded] == [1.0, 1.0, 0.3]
    assert [r.run for r in recorded] == [runs[0].run, runs[0].run, runs[1].run]
    assert all(len(r.calls) == 3 for r in recorded)


def synthetic(i: int, rng: random.Random) -> EpisodeRecord:
    status = rng.choice(["scored", "scored", "scored", "failed", "unscored"])
    reward = None if status == "unscored" else (0.0 if status == "failed" else rng.choice([0.0, 0.3, 0.7, 1.0]))
    call = RecordedCall(tool="lookup", arguments={"word": "amber"}, result='{"number":42}', seconds=0.001)
    return EpisodeRecord(
        episode_id=f"ep-{i:05d}",
        task_id=f"task-{i % 50}",
        split=rng.choice(["train", "eval"]),
        prompt='Code word: "amber".',
        calls=[call] * 3,
        status=status,
        cause="scored" if status == "scored" else "env_died",
        reward=reward,
    )


def test_a_thousand_episodes_are_indexed_and_queried_in_under_a_second(tmp_path: Path) -> None:
    rng = random.Random(0)
    writer = RecordWriter(tmp_path, "episodes", max_file_bytes=200_000)  # rotated: several files
    episodes = [synthetic(i, rng) for i in range(1000)]
    for record in episodes:
        writer.write(record)
    writer.close()

    began = time.perf_counter()
    with EpisodeStore(tmp_path) as store:
        found = store.find(split="eval", status="scored", min_reward=0.7)
        tally = store.tally(task="task-7")
        one = store.episode("ep-00777")
    took = time.perf_counter() - began

    assert took < 1.0, f"the query took {took:.3f}s"
    expected = [
        r.episode_id
        for r in reversed(episodes)
        if r.split == "eval" and r.status == "scored" and r.reward is not None and r.reward >= 0.7
    ]
    assert [r.episode_id for r in found] == expected
    assert tally.records == 20 and tally.tasks == 1
    assert one == episodes[777].model_copy(update={"run": writer.run})
    assert len(list((tmp_path / writer.run).glob("episodes-*.jsonl"))) > 3


def test_corral_episodes_lists_filters_shows_a_transcript_and_exports(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path, "episodes")
    rng = random.Random(1)
    for i in range(30):
        writer.write(synthetic(i, rng))
    writer.close()
    runner = CliRunner()

    listed = runner.invoke(app, ["episodes", str(tmp_path), "--status", "unscored", "--limit", "3"])
    ambiguous = runner.invoke(app, ["episodes", str(tmp_path), "ep-0001"])  # ep-00010 to ep-00019
    one = runner.invoke(app, ["episodes", str(tmp_path), "ep-00012"])
    bad = runner.invoke(app, ["episodes", str(tmp_path), "--status", "lost"])
    exported = runner.invoke(app, ["episodes", str(tmp_path), "--export", "sft", "--out", str(tmp_path / "sft.jsonl")])

    assert listed.exit_code == 0 and "unscored" in listed.output and "episodes (" in listed.output
    assert listed.output.count("env_died") == 3
    assert ambiguous.exit_code == 2 and "'ep-0001' begins 10 episodes' ids" in ambiguous.output
    assert one.exit_code == 0 and '[1] lookup(word="amber")' in one.output and '-> {"number":42}' in one.output
    assert bad.exit_code == 2 and "choose one of: scored, failed, unscored" in bad.output
    assert exported.exit_code == 0 and "conversations to" in exported.output
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert rows and all(row["messages"][-1] == {"role": "assistant", "content": ""} for row in rows)


def test_an_rl_export_without_the_trainers_rollouts_says_where_they_are(tmp_path: Path) -> None:
    server, trainer = tmp_path / "server", tmp_path / "trainer"
    writer = RecordWriter(server, "episodes")
    writer.write(synthetic(0, random.Random(1)))
    writer.close()
    runner = CliRunner()

    refused = runner.invoke(app, ["episodes", str(server), "--export", "rl", "--out", str(tmp_path / "rl.jsonl")])

    assert refused.exit_code == 2 and not (tmp_path / "rl.jsonl").exists()
    assert refused.output == (
        f"error: --export rl writes the trainer's rollouts (their token ids), and {server} holds none, only the "
        "server's episodes: pass the folder the trainer recorded in (CorralRollout(record_dir=...), corral eval "
        "--record) with --rollouts DIR\n"
    )
    tokens = RecordWriter(trainer, "rollouts")
    tokens.write(
        RolloutRecord(
            episode_id="ep-00000",
            task_id="t",
            prompt_ids=[1],
            completion_ids=[2],
            env_mask=[1],
            logprobs=[-0.5],
            reward=1.0,
            status="scored",
        )
    )
    tokens.close()
    other_run = runner.invoke(
        app,
        [
            "episodes",
            str(server),
            "--rollouts",
            str(trainer),
            "--run",
            "nope",
            "--export",
            "rl",
            "--out",
            str(tmp_path / "rl.jsonl"),
        ],
    )
    assert other_run.exit_code == 2 and "is of this --run and --split; list the runs with" in other_run.output
    exported = runner.invoke(
        app,
        ["episodes", str(server), "--rollouts", str(trainer), "--export", "rl", "--out", str(tmp_path / "rl.jsonl")],
    )
    assert exported.exit_code == 0 and "wrote 1 trajectories" in exported.output


def test_sft_export_keeps_the_best_episodes_of_each_task_within_its_quota(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path, "episodes")
    rewards = {"a": [1.0, 0.3, 1.0, 0.7], "b": [0.3], "c": [0.0]}
    for task, values in rewards.items():
        for i, reward in enumerate(values):
            writer.write(
                EpisodeRecord(
                    episode_id=f"{task}{i}",
                    task_id=task,
                    cause="scored",
                    status="scored",
                    reward=reward,
                    prompt=f"Task {task}",
                )
            )
    writer.write(EpisodeRecord(episode_id="d0", task_id="d", cause="abandoned", status="unscored", reward=None))
    writer.close()
    tokens = RecordWriter(tmp_path, "rollouts")
    tokens.write(
        RolloutRecord(
            episode_id="a1",
            task_id="a",
            prompt_ids=[1, 2],
            completion_ids=[3, 4],
            env_mask=[1, 0],
            logprobs=[-0.5, 0.0],
            reward=0.3,
            status="scored",
            messages=[{"role": "user", "content": "Task a"}, {"role": "assistant", "content": "hi"}],
        )
    )
    tokens.close()

    with EpisodeStore(tmp_path) as store:
        best = sft_dataset(store, per_task=2, seed=0)
        strict = sft_dataset(store, per_task=1, min_reward=0.5, seed=3)
        rl = rl_dataset(store)
        rebuilt, _ = conversation(store.episode("b0"))
        exact, _ = conversation(store.episode("a1"), store.rollout("a1"))

    assert sorted(zip(best["task_id"], best["reward"], strict=True)) == [("a", 1.0), ("a", 1.0), ("b", 0.3), ("c", 0.0)]
    assert list(zip(strict["task_id"], strict["reward"], strict=True)) == [("a", 1.0)]
    assert rl["episode_id"] == ["a1"] and rl[0]["env_mask"] == [1, 0] and rl[0]["reward"] == 0.3
    assert rebuilt == [{"role": "user", "content": "Task b"}, {"role": "assistant", "content": ""}]
    assert exact[-1] == {"role": "assistant", "content": "hi"}  # the trainer's own record of the words
    assert os.path.exists(tmp_path / "index.sqlite")


def test_a_bundle_can_ask_to_record_its_episodes(serve, tmp_path: Path) -> None:
    bundle = tmp_path / "codeword"
    shutil.copytree(CODEWORD, bundle)
    with open(bundle / "bundle.toml", "a") as manifest:
        manifest.write('record = "episodes-recorded"\n')  # under [serve], the file's last table

    server = serve(bundle)
    play_codeword(server.url)
    server.stop()

    with EpisodeStore(bundle / "episodes-recorded") as store:
        assert store.tally().records == 1 and store.runs()[0].source == "codeword"
