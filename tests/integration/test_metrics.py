"""What an operator watches: `/metrics` counts and times episodes by how they ended, and each
episode ends with one structured log line."""

from __future__ import annotations

import json
import logging
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.client import Bundle, CapacityError
from tests.conftest import FIXTURES

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def scraped(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of `/metrics`, by name and labels."""
    text = httpx.get(f"{url}/metrics", trust_env=False).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_episodes_by_how_they_ended_and_each_ends_with_a_log_line(serve, caplog):
    server = serve(FIXTURES / "toybox", max_concurrent_envs=2, tool_timeout_s=1)

    def lines() -> list[dict]:
        return [json.loads(record.getMessage()) for record in caplog.records if record.name == "corral.episodes"]

    with caplog.at_level(logging.INFO, logger="corral.episodes"):  # the episodes' lines, until the last is in
        with Bundle(server.url, split="toy") as env:
            first, second, third = env.factory(), env.factory(), env.factory()
            first.reset(**env.dataset[0])
            first.say(text="apple")
            assert first.get_reward() == 1.0
            second.reset(**env.dataset[0])
            second.wait(seconds=5)  # past the 1 s deadline: the agent's doing
            assert second.get_reward() == 0.0
            with pytest.raises(CapacityError):
                third.reset(**env.dataset[0])
            first.reset(**env.dataset[0])  # left open: abandoned once its session closes
        # The server releases a session once its socket has closed, and ends its episode beside it:
        # poll for both (the session count, the episode's line), however busy the machine.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            samples = scraped(server.url)
            if (
                not samples[("corral_sessions_active", ())]
                and not samples[("corral_sandboxes_live", ())]
                and len(lines()) == 3
            ):
                break
            time.sleep(0.05)
    ended = {labels: value for (name, labels), value in samples.items() if name == "corral_episodes_ended_total"}
    assert ended[(("cause", "scored"), ("status", "scored"))] == 1
    assert ended[(("cause", "tool_timeout"), ("status", "failed"))] == 1
    assert ended[(("cause", "abandoned"), ("status", "unscored"))] == 1
    assert samples[("corral_episodes_started_total", ())] == 3
    assert samples[("corral_sessions_refused_total", ())] == 1
    assert samples[("corral_reset_seconds_count", ())] == 3
    assert samples[("corral_tool_call_seconds_count", ())] == 2
    assert samples[("corral_verify_seconds_count", ())] == 1
    assert samples[("corral_sessions_active", ())] == 0 and samples[("corral_sandboxes_live", ())] == 0

    assert [(line["status"], line["cause"], line["reward"]) for line in lines()] == [
        ("scored", "scored", 1.0),
        ("failed", "tool_timeout", 0.0),
        ("unscored", "abandoned", None),
    ]
    timed_out = lines()[1]
    assert "wait didn't answer within 1s" in timed_out["reason"] and timed_out["tool_calls"] == 1
    assert timed_out["task"] == "say-apple" and set(timed_out["seconds"]) == {
        "start",
        "reset",
        "tools",
        "verify",
        "total",
    }
    assert timed_out["seconds"]["tools"] >= 1.0
