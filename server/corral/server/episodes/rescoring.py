"""Scoring recorded episodes again (`corral rescore`): a fixed verifier re-grades a run.

Only the verifiers run, never the env nor anything the agent wrote: a Python verifier is given
the task (from the new bundle) and the env's final report (from the record), in a worker of the
same `VerifierPool` the server scores in, within the same deadline, and the reward is picked by
the bundle's rule as the server picks it. The new scores are kept beside the record (the
store's rescores.ndjson), keyed by the verifiers' digests; the record itself is never changed.

An episode is refused, with the reason, when its record cannot be scored again: it was not
scored at the time, its task is not in the bundle, it kept no report, or one of its verifiers
needs more than the report (a command verifier, or `RESCORE = "state"`) or says `RESCORE = "no"`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from corral.errors import VerifierError
from corral.protocol.records import EpisodeRecord, RescoreRecord
from corral.protocol.rewards import pick_reward
from corral.server.bundles.format import Task
from corral.server.bundles.model import LoadedBundle
from corral.server.bundles.verifier_pool import VerifierPool
from corral.server.bundles.verifiers import rescore_mode, verifier_digest

NEEDS_STATE = "it needs the episode's final state, which records do not keep yet"


@dataclass
class Tally:
    """What a re-score did: episodes re-scored (and of them, changed), failed and refused, with
    each reason's count."""

    rescored: int = 0
    changed: int = 0
    failed: int = 0
    refused: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def done(self) -> int:
        return self.rescored + self.failed + self.refused

    def add(self, result: RescoreRecord) -> None:
        if result.status == "rescored":
            self.rescored += 1
            self.changed += result.changed
        elif result.status == "failed":
            self.failed += 1
        else:
            self.refused += 1
        if result.reason is not None:
            self.reasons[result.reason] = self.reasons.get(result.reason, 0) + 1


class Rescorer:
    """`bundle`'s Python verifiers, ready to score recorded episodes again: `workers` processes,
    each verification within `timeout_s` (the server's verify deadline)."""

    def __init__(self, bundle: LoadedBundle, *, workers: int, timeout_s: float):
        self.bundle = bundle
        self.timeout_s = timeout_s
        self.pool = VerifierPool(bundle.verifiers, workers)
        self.modes = {name: rescore_mode(path) for name, path in bundle.verifiers.items()}
        self.digests = {name: verifier_digest(path) for name, path in bundle.verifiers.items()}

    async def rescore(self, record: EpisodeRecord) -> RescoreRecord:
        """`record` scored again by the bundle's verifiers: rescored, failed or refused, with why."""
        task = self.bundle.tasks.get(record.task_id)
        result = RescoreRecord(
            episode_id=record.episode_id,
            run=record.run,
            task_id=record.task_id,
            bundle=self.bundle.manifest.name,
            status="refused",
            old_reward=record.reward,
        )
        refusal = self._refusal(record, task)
        if refusal is not None or task is None or record.report is None:
            return result.model_copy(update={"reason": refusal})
        digests = {score_id: self.digests[name] for score_id, name in task.verifiers.items()}
        result = result.model_copy(update={"verifier_digests": digests, "status": "failed"})
        try:
            scores = await self.pool.score(task.model_dump(), record.report, task.verifiers, timeout_s=self.timeout_s)
        except TimeoutError:
            return result.model_copy(update={"reason": f"the verifiers did not finish within {self.timeout_s:g}s"})
        except VerifierError as error:
            return result.model_copy(update={"reason": str(error)})
        try:
            reward = pick_reward(scores, self.bundle.manifest.serve.reward)
        except Exception as error:  # noqa: BLE001 - RewardError, or anything a user's reward function raises
            reason = f"the reward could not be computed from {scores}: {error}"
            return result.model_copy(update={"reason": reason, "scores": scores})
        return result.model_copy(
            update={"status": "rescored", "scores": scores, "reward": reward, "changed": reward != record.reward}
        )

    def _refusal(self, record: EpisodeRecord, task: Task | None) -> str | None:
        """Why `record` cannot be scored again by this bundle; None when it can."""
        if record.status != "scored":
            return (
                f"the episode was not scored (it ended {record.status}: {record.cause}), so no verifier gave its reward"
            )
        if task is None:
            return f"task {record.task_id} is not in bundle {self.bundle.manifest.name}"
        for name in task.verifiers.values():
            if name in self.bundle.command_verifiers:
                return f"verifier {name} is a command verifier: {NEEDS_STATE}"
            if self.modes[name] == "state":
                return f'verifier {name} declares RESCORE = "state": {NEEDS_STATE}'
            if self.modes[name] == "no":
                return f'verifier {name} declares RESCORE = "no": it cannot score an episode again'
        if record.report is None:
            return record.report_left_out or (
                "the record keeps no report of the env (it was recorded before records kept one, or the env gave none)"
            )
        return None

    async def rescore_all(
        self, records: Iterable[EpisodeRecord], keep: Callable[[RescoreRecord, Tally], None], *, at_once: int
    ) -> Tally:
        """Score every record again, `at_once` at a time, handing each result to `keep` as it
        comes (with the tally so far, it counted)."""
        tally = Tally()
        lanes = asyncio.Semaphore(at_once)

        async def one(record: EpisodeRecord) -> None:
            async with lanes:
                result = await self.rescore(record)
            tally.add(result)
            keep(result, tally)

        await self.pool.ready()
        await asyncio.gather(*(one(record) for record in records))
        return tally

    async def aclose(self) -> None:
        await self.pool.aclose()
