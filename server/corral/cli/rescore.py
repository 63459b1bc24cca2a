"""`corral rescore DIR --bundle NEW`: score recorded episodes again with a bundle's (fixed) verifiers.

The new scores go beside the records (each run's rescores.ndjson), never over them; `corral
episodes DIR` then shows the new reward and marks the episodes whose reward changed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from corral.cli.exits import fail
from corral.errors import BundleInvalid, ConfigError
from corral.protocol.frames import DEFAULT_RESET_TIMEOUT_S
from corral.protocol.record_store import EpisodeStore, append_rescore
from corral.protocol.records import EpisodeRecord, RescoreRecord
from corral.server.bundles.checks import check_reward_rule, check_verifiers
from corral.server.bundles.model import LoadedBundle
from corral.server.bundles.problems import merge_shared
from corral.server.episodes.rescoring import Rescorer, Tally
from corral.server.formats import load_bundle

PROGRESS_EVERY_S = 2.0
REASONS_SHOWN = 5


def rescore(
    folder: Annotated[
        Path, typer.Argument(metavar="DIR", help="The folder episodes were recorded in.", show_default=False)
    ],
    bundle: Annotated[
        Path,
        typer.Option(help="The bundle whose verifiers score the episodes again (the fixed one).", show_default=False),
    ],
    run: Annotated[str | None, typer.Option(help="Only this run (its name, or a prefix).")] = None,
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    split: Annotated[str | None, typer.Option(help="Only this split.")] = None,
    status: Annotated[str | None, typer.Option(help="Only episodes that ended so: scored, failed or unscored.")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Processes that run the bundle's Python verifiers.")] = 2,
) -> None:
    """Score recorded episodes again with BUNDLE's verifiers, on each episode's kept report; write
    the new scores beside the old (never over them) and say how many changed."""
    loaded = load_bundle(bundle)
    check_verifiers(loaded, {})  # each imports, and declares a RESCORE it may
    check_reward_rule(loaded, loaded.manifest.serve.reward)
    if loaded.problems:
        typer.echo(str(BundleInvalid(bundle, merge_shared(loaded.problems))), err=True)
        raise typer.Exit(1)
    try:
        with EpisodeStore(folder) as store:
            rows = store.find(run=run, task=task, split=split, status=status)
            records = (record for record in store.records(rows) if isinstance(record, EpisodeRecord))
            tally = asyncio.run(_rescore(loaded, folder, records, len(rows), workers))
    except ConfigError as error:
        fail(str(error))
    typer.echo(summary(tally))


async def _rescore(
    bundle: LoadedBundle, folder: Path, records: Iterator[EpisodeRecord], total: int, workers: int
) -> Tally:
    timeout_s = bundle.manifest.serve.reset_timeout_s or DEFAULT_RESET_TIMEOUT_S  # the server's verify deadline
    rescorer = Rescorer(bundle, workers=workers, timeout_s=timeout_s)
    shown_at = time.monotonic()

    def keep(result: RescoreRecord, tally: Tally) -> None:
        nonlocal shown_at
        append_rescore(folder, result)
        if time.monotonic() - shown_at >= PROGRESS_EVERY_S or tally.done == total:
            shown_at = time.monotonic()
            typer.echo(f"rescore: {tally.done}/{total} episodes; {_counts(tally)}", err=True)

    try:
        return await rescorer.rescore_all(records, keep, at_once=workers * 4)
    finally:
        await rescorer.aclose()


def _counts(tally: Tally) -> str:
    return f"{tally.rescored} re-scored ({tally.changed} changed), {tally.failed} failed, {tally.refused} refused"


def summary(tally: Tally) -> str:
    """What `corral rescore` did, and the commonest reasons episodes failed or were refused."""
    lines = [f"{tally.done} episodes: {_counts(tally)}"]
    for reason, count in sorted(tally.reasons.items(), key=lambda item: -item[1])[:REASONS_SHOWN]:
        lines.append(f"  {count:>6}  {reason}")
    if len(tally.reasons) > REASONS_SHOWN:
        lines.append(f"  ... {len(tally.reasons) - REASONS_SHOWN} other reasons")
    return "\n".join(lines)
