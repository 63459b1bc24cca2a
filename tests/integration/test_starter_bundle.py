"""The bundle `corral init` writes plays as it says: a served copy scores 1 for the counter
ending on the target and 0 otherwise, through `corral.client.Bundle` as a trainer plays it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.client import Bundle

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def init_bundle(parent: Path, name: str = "my-bundle") -> Path:
    """The starter bundle, written with `corral init NAME --path PARENT`."""
    result = CliRunner().invoke(app, ["init", name, "--path", str(parent)])
    assert result.exit_code == 0, result.output
    return parent / name


def play_the_starter(url: str) -> None:
    """Reach the target in a train task (score 1) and miss it in the eval task (score 0)."""
    with Bundle(url, split="train") as env:
        assert env.splits == {"all": 3, "train": 2, "eval": 1}
        assert [row["task_id"] for row in env.dataset] == ["from-2-to-10", "from-3-to-12"]
        e = env.factory()
        e.reset(**env.dataset[0])  # the counter is at 2; make it 10
        assert e.multiply(factor=5) == '{"count":10}'
        assert e.get_reward() == 1.0

        eval_row = env.dataset_for("eval")[0]  # the counter is at 5; make it 9
        assert eval_row["task_id"] == "from-5-to-9"
        e.reset(**eval_row)
        assert e.add(amount=3) == '{"count":8}'
        assert e.get_reward() == 0.0


def test_the_starter_bundle_scores_an_episode_on_the_local_sandbox(tmp_path, serve):
    server = serve(init_bundle(tmp_path), sandbox="local")

    play_the_starter(server.url)
