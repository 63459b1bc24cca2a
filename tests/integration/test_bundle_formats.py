"""A bundle format registered beside corral's and Harbor's serves episodes as they do."""

from __future__ import annotations

import pytest

from corral.client import Bundle
from corral.server import formats
from tests.unit.test_bundle_formats import CsvFormat, csv_folder

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def test_a_task_of_a_third_format_plays_and_scores(tmp_path, monkeypatch):
    monkeypatch.setattr(formats, "FORMATS", [*formats.FORMATS, CsvFormat()])

    with Bundle.local(csv_folder(tmp_path), split="train", sandbox="local") as env:
        environment = env.factory()
        environment.reset(**env.dataset[1])
        environment.say(text="fig")
        assert environment.get_reward() == 1.0
        environment.reset(**env.dataset[0])
        environment.say(text="fig")
        assert environment.get_reward() == 0.0
