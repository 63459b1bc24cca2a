"""The viewer's web app: routes only; the pages are built in `pages`, `transcripts` and `tokens`.

corral view records/ [--rollouts GPU_DIR] [--tokenizer MODEL_DIR] [--port 8765] [--token-file FILE]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response

from corral.cli.viewer.access import require_token
from corral.cli.viewer.layout import FILTERS
from corral.cli.viewer.pages import COMPARED, compare_page, run_page, runs_page, step_page
from corral.cli.viewer.tokens import load_tokenizer
from corral.cli.viewer.transcripts import episode_page, group_page
from corral.client import run_views
from corral.client.difficulty_exports import Difficulty, rl_prompts, sft_rows
from corral.client.run_headers import TOKENIZER
from corral.client.run_index import EpisodeFilter, RunIndex

_NUMBERS = {"min_reward": float, "max_reward": float, "min_step": int, "max_step": int}


def episode_filter(request: Request, run: str | None = None) -> EpisodeFilter:
    """The filter a page's URL query asks for (empty fields ignored), so that links can be shared."""
    given = {name: request.query_params.get(name, "").strip() for name in FILTERS}
    values: dict[str, object] = {"run": run, "flagged": given.pop("flagged") in ("1", "true", "on")}
    for name, text in given.items():
        if not text:
            continue
        try:
            values[name] = _NUMBERS.get(name, str)(text)
        except ValueError:
            raise HTTPException(
                400, f"the filter {name}={text!r} is not a number; give one, or leave it empty"
            ) from None
    return EpisodeFilter(**values)  # type: ignore[arg-type]


def create_viewer(
    records: Path | str,
    rollouts: Path | str | None = None,
    *,
    success: float = 1.0,
    tokenizer: str | None = None,
    token: str | None = None,
) -> FastAPI:
    """The viewer over a records folder (and the trainer's, when it recorded elsewhere); with a
    tokenizer (its folder or name; by default the records' own `tokenizer/`, when they keep one),
    an episode's tokens show their text; with a token, only a request that carries it is
    answered (`access`)."""
    records, rollouts = Path(records), None if rollouts is None else Path(rollouts)
    index = RunIndex(records, rollouts, success=success)
    if tokenizer is None and (records / TOKENIZER).is_dir():  # a recipe's --record keeps it there
        tokenizer = str(records / TOKENIZER)
    text = None if tokenizer is None else load_tokenizer(tokenizer)
    app = FastAPI(title="corral view", docs_url=None, redoc_url=None, openapi_url=None)
    if token is not None:
        require_token(app, token)

    @app.get("/", response_class=HTMLResponse)
    def runs() -> str:
        return runs_page(index)

    @app.get("/compare", response_class=HTMLResponse)
    def compare(run: list[str] = Query(default=[])) -> str:  # noqa: B008 - FastAPI's way to read a repeated key
        if not 1 <= len(run) <= COMPARED:
            raise HTTPException(400, f"tick 1 to {COMPARED} runs to compare (/compare?run=A&run=B); {len(run)} given")
        return compare_page(index, run)

    @app.get("/runs/{run}", response_class=HTMLResponse)
    def run(run: str, request: Request) -> str:
        return run_page(index, run, episode_filter(request, run))

    @app.get("/runs/{run}/steps/{step}", response_class=HTMLResponse)
    def step(run: str, step: int) -> str:
        return step_page(index, run, step)

    @app.get("/runs/{run}/steps/{step}/groups/{group}", response_class=HTMLResponse)
    def group(run: str, step: int, group: int) -> str:
        return _found(group_page(index, run, step, group), f"no group {group} at step {step} of run {run}")

    @app.get("/episodes/{episode_id}", response_class=HTMLResponse)
    def episode(episode_id: str) -> str:
        return _found(episode_page(index, episode_id, text), f"no episode {episode_id} is recorded in {records}")

    @app.get("/runs/{run}/export.jsonl")
    def export(
        run: str,
        request: Request,
        kind: Literal["sft", "prompts"] = "sft",
        min_pass: float = 0.0,
        max_pass: float = 1.0,
        per_prompt: int = 1,
        target: int | None = None,
        seed: int = 0,
    ) -> Response:
        """The page's filter as training data by difficulty (its step range is the window)."""
        where = episode_filter(request, run)
        choice = Difficulty(
            min_pass, max_pass, where.min_step, where.max_step, per_prompt, target, seed=seed, success=success
        )
        rows = sft_rows(index, choice, [run], where)[0] if kind == "sft" else rl_prompts(index, choice, [run], where)
        return Response(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
            media_type="application/jsonl",
            headers={"Content-Disposition": f'attachment; filename="{run}-{kind}.jsonl"'},
        )

    @app.get("/api/count")
    def count(request: Request) -> dict[str, int]:
        return {"episodes": run_views.count(index, episode_filter(request, request.query_params.get("run") or None))}

    return app


def _found(page: str | None, missing: str) -> str:
    if page is None:
        raise HTTPException(404, missing)
    return page
