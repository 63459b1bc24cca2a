"""The /metrics of a host of several workers: every worker's samples added up, label set by
label set, a `_created` time the earliest."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from corral.server.workers.metrics import summed


def worker_text(scored: int, unscored: int, calls: list[float], sessions: int) -> str:
    registry = CollectorRegistry()
    ended = Counter("corral_episodes_ended", "Episodes ended.", ["status"], registry=registry)
    ended.labels(status="scored").inc(scored)
    if unscored:
        ended.labels(status="unscored").inc(unscored)
    call = Histogram("corral_tool_call_seconds", "One tool call.", buckets=(0.01, 1), registry=registry)
    for seconds in calls:
        call.observe(seconds)
    Gauge("corral_sessions_active", "Sessions open now.", registry=registry).set(sessions)
    return generate_latest(registry).decode()


def samples(text: bytes) -> dict[tuple[str, tuple], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


def test_every_workers_counts_add_up_and_a_label_only_one_has_is_kept():
    total = samples(summed([worker_text(3, 0, [0.005, 0.5], 2), worker_text(4, 1, [2.0], 5)]))
    assert total[("corral_episodes_ended_total", (("status", "scored"),))] == 7
    assert total[("corral_episodes_ended_total", (("status", "unscored"),))] == 1
    assert total[("corral_tool_call_seconds_bucket", (("le", "0.01"),))] == 1
    assert total[("corral_tool_call_seconds_bucket", (("le", "+Inf"),))] == 3
    assert total[("corral_tool_call_seconds_count", ())] == 3
    assert total[("corral_sessions_active", ())] == 7


def test_a_created_time_is_the_earliest():
    def created(at: float) -> str:
        return f"# HELP corral_reset_seconds_created A reset.\n# TYPE corral_reset_seconds_created gauge\ncorral_reset_seconds_created {at}\n"

    assert samples(summed([created(200.0), created(100.0)]))[("corral_reset_seconds_created", ())] == 100.0
