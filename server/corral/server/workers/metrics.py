"""`GET /metrics` for a host of several workers (`corral serve --workers N`): the worker that is
asked reads every other worker's registry over its private Unix socket and answers the sum.

Counters, histograms and gauges add up (sessions, live sandboxes and warm sandboxes are the
host's); a `_created` time is the earliest. A worker that does not answer (it died and is
being replaced) is left out: its counts went with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import httpx
from prometheus_client import CollectorRegistry, Metric, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from corral.server.workers.forward import Forwarder
from corral.server.workers.seat import WorkerSeat

log = logging.getLogger("corral.server")

OWN_ONLY = "corral-metrics-own"  # the header a worker sends a peer: answer your own registry, don't ask further
PEER_TIMEOUT_S = 10.0


async def peers_metrics(seat: WorkerSeat, peers: Forwarder, authorization: str | None) -> list[str]:
    """Every other worker's /metrics text, from those that answer (asked over `peers`' pooled clients)."""
    headers = {OWN_ONLY: "1", **({"authorization": authorization} if authorization else {})}
    answers = await asyncio.gather(
        *(_ask(peers.peer_client(index), index, headers) for index in range(len(seat.pids)) if index != seat.index)
    )
    return [text for text in answers if text is not None]


async def _ask(client: httpx.AsyncClient, index: int, headers: dict[str, str]) -> str | None:
    try:
        response = await client.get("http://worker/metrics", headers=headers, timeout=PEER_TIMEOUT_S)
        response.raise_for_status()
        return response.text
    except httpx.HTTPError as error:
        log.info("worker %d left out of /metrics: %s", index, error)
        return None


def summed(texts: Iterable[str]) -> bytes:
    """One Prometheus text of the samples of `texts` added up, label set by label set."""
    families: dict[str, Metric] = {}
    values: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            for sample in family.samples:
                key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                if key not in values:
                    values[key] = sample.value
                elif sample.name.endswith("_created"):
                    values[key] = min(values[key], sample.value)
                else:
                    values[key] += sample.value
    for (family_name, name, labels), value in values.items():
        families[family_name].add_sample(name, dict(labels), value)
    registry = CollectorRegistry()
    registry.register(_Fixed(list(families.values())))
    return generate_latest(registry)


class _Fixed:
    """A collector of metric families already made."""

    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families
