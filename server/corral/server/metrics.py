"""What the server counts and times, for `GET /metrics` (Prometheus text) and for the one
log line each episode ends with.

Each served bundle has a registry of its own, so servers in one process (tests, notebooks)
never mix their counts.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

from corral.protocol.records import EpisodeRecord
from corral.sandboxes import ProviderStatus

episodes_log = logging.getLogger("corral.episodes")

# Seconds: from a warm container's few ms to a cold image start, a tool's deadline, a verifier's run.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    """The server's counters, histograms and gauges; the gauges are read when scraped, from
    `sandboxes` and from what `count_sessions` is given."""

    def __init__(self, sandboxes: Callable[[], ProviderStatus]):
        self.registry = CollectorRegistry()
        registry = self.registry
        self._sessions = Gauge("corral_sessions_active", "Sessions open now.", registry=registry)
        self.sessions_refused = Counter("corral_sessions_refused", "Sessions refused at the limit.", registry=registry)
        self.episodes_started = Counter("corral_episodes_started", "Episodes reset.", registry=registry)
        self.episodes_ended = Counter(
            "corral_episodes_ended", "Episodes ended, by status and cause.", ["status", "cause"], registry=registry
        )
        self.untouched_replays = Counter(
            "corral_untouched_replays",
            "Episodes whose failure was judged by replaying their task untouched, by "
            "what the replay showed of the platform (sound: the failure was the agent's).",
            ["platform"],
            registry=registry,
        )
        self.sandbox_start = Histogram(
            "corral_sandbox_start_seconds", "Starting an episode's sandbox.", buckets=BUCKETS, registry=registry
        )
        self.reset = Histogram(
            "corral_reset_seconds",
            "A whole reset: sandbox, handshake, the task's load.",
            buckets=BUCKETS,
            registry=registry,
        )
        self.tool_call = Histogram("corral_tool_call_seconds", "One tool call.", buckets=BUCKETS, registry=registry)
        self.verify = Histogram(
            "corral_verify_seconds", "Scoring an episode: report and verifiers.", buckets=BUCKETS, registry=registry
        )
        Gauge("corral_sandboxes_live", "Sandboxes serving episodes now.", registry=registry).set_function(
            lambda: sandboxes().live
        )
        self._warm = Gauge(
            "corral_warm_pool_ready", "Started sandboxes waiting for an episode, by env.", ["env"], registry=registry
        )
        registry.register(WarmPoolDry(sandboxes))
        self._sandboxes = sandboxes

    def count_sessions(self, sessions: Callable[[], int]) -> None:
        self._sessions.set_function(sessions)

    def render(self) -> bytes:
        for env, ready in self._sandboxes().warm.items():
            self._warm.labels(env=env).set(ready)
        return generate_latest(self.registry)

    def episode_ended(self, record: EpisodeRecord) -> None:
        """Count the episode and write its one log line (JSON, logger `corral.episodes`)."""
        self.episodes_ended.labels(status=record.status, cause=record.cause).inc()
        fields = {
            "episode": record.episode_id,
            "session": record.session_id,
            "task": record.task_id,
            "status": record.status,
            "cause": record.cause,
            "reward": record.reward,
            "reason": record.reason,
            "tool_calls": record.tool_calls,
            "seconds": {k: round(v, 4) for k, v in record.seconds.items()},
        }
        episodes_log.info(json.dumps(fields))


class WarmPoolDry:
    """`corral_warm_pool_dry_total`: resets that found their env's warm pool empty (a pool too
    small for its load), a counter the provider keeps and this reads when scraped."""

    def __init__(self, sandboxes: Callable[[], ProviderStatus]):
        self._sandboxes = sandboxes

    def describe(self) -> Iterator[CounterMetricFamily]:  # so registering does not read the provider
        yield self._family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = self._family()
        for env, dry in self._sandboxes().warm_dry.items():
            family.add_metric([env], dry)
        yield family

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "corral_warm_pool_dry", "Resets that found no warm sandbox ready, by env.", labels=["env"]
        )


class Timed:  # a class, not contextlib: it times every tool call
    """Add the block's duration to `seconds[phase]` (an episode's time by phase) and observe it in `histogram`."""

    def __init__(self, seconds: dict[str, float], phase: str, histogram: Histogram):
        self._seconds, self._phase, self._histogram = seconds, phase, histogram

    def __enter__(self) -> None:
        self._began = time.monotonic()

    def __exit__(self, *_: object) -> None:
        took = time.monotonic() - self._began
        self._seconds[self._phase] += took
        self._histogram.observe(took)
