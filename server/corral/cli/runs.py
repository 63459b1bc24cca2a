"""The `corral` commands about models and what they played: `eval` (a model on a split),
`episodes` (the recorded episodes: listed, one shown, or exported as training data) and `view`
(training runs in a local web app). `corral.cli.main` registers them on its app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from corral.cli.exits import exits_on_refusal, fail, refuse_bad_target
from corral.cli.options import TargetArg, UrlTokenOption
from corral.cli.token import serve_token
from corral.errors import ConfigError


def episodes(
    folder: Annotated[
        Path, typer.Argument(metavar="DIR", help="The folder episodes were recorded in.", show_default=False)
    ],
    episode: Annotated[
        str | None, typer.Argument(help="Show this episode (its id, or a unique prefix) as a transcript.")
    ] = None,
    run: Annotated[str | None, typer.Option(help="Only this run (its name, or a prefix).")] = None,
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    split: Annotated[str | None, typer.Option(help="Only this split.")] = None,
    status: Annotated[str | None, typer.Option(help="Only episodes that ended so: scored, failed or unscored.")] = None,
    min_reward: Annotated[float | None, typer.Option(help="Only episodes with at least this reward.")] = None,
    max_reward: Annotated[float | None, typer.Option(help="Only episodes with at most this reward.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Rows shown.")] = 50,
    runs: Annotated[bool, typer.Option("--runs", help="List the runs recorded, and stop.")] = False,
    rollouts: Annotated[
        Path | None, typer.Option(help="The trainer's records, when it recorded into another folder.")
    ] = None,
    export: Annotated[
        str | None,
        typer.Option(
            help="Write training data as JSON lines to --out: sft (the best episodes of each task, as conversations), rl (the trainer's rollouts, as token ids) or prompts (the prompts of the tasks --min-pass/--max-pass keep, to train on again)."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="The file --export writes.")] = None,
    per_task: Annotated[
        int, typer.Option(min=1, help="--export sft: the most episodes kept per task (the best first).")
    ] = 1,
    seed: Annotated[int, typer.Option(help="--export sft: the draw among episodes of equal reward.")] = 0,
    min_pass: Annotated[
        float | None,
        typer.Option(help="--export sft/prompts by difficulty: keep tasks whose pass rate is at least this."),
    ] = None,
    max_pass: Annotated[float | None, typer.Option(help="... and at most this.")] = None,
    min_step: Annotated[
        int | None, typer.Option(help="... pass rates over the steps from this one (default: the whole run).")
    ] = None,
    max_step: Annotated[int | None, typer.Option(help="... up to this one.")] = None,
    per_prompt: Annotated[int, typer.Option(min=1, help="... the most rows one prompt gives.")] = 1,
    target: Annotated[
        int | None, typer.Option(min=1, help="... rows in all, every prompt's first before any second.")
    ] = None,
    by_tool_calls: Annotated[
        bool, typer.Option("--by-tool-calls", help="... draw a prompt's rows weighted by their tool calls.")
    ] = False,
    success: Annotated[float, typer.Option(help="... the reward at which an episode passes.")] = 1.0,
) -> None:
    """List recorded episodes (newest first, filtered), show one as a transcript, or export them."""
    from corral.cli.episodes import Filters, Request, answer, by_difficulty

    filters = Filters(run=run, task=task, split=split, status=status, min_reward=min_reward, max_reward=max_reward)
    try:
        typer.echo(
            answer(
                Request(
                    folder,
                    episode,
                    filters,
                    limit=limit,
                    runs=runs,
                    rollouts=rollouts,
                    export=export,
                    out=out,
                    per_task=per_task,
                    seed=seed,
                    difficulty=by_difficulty(
                        min_pass, max_pass, min_step, max_step, per_prompt, target, by_tool_calls, success, seed
                    ),
                )
            )
        )
    except ConfigError as error:
        fail(str(error))


def view(
    ctx: typer.Context,
    folder: Annotated[
        Path,
        typer.Argument(metavar="DIR", help="The folder episodes and rollouts were recorded in.", show_default=False),
    ],
    rollouts: Annotated[
        Path | None, typer.Option(help="The trainer's records, when it recorded into another folder.")
    ] = None,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8765,
    success: Annotated[float, typer.Option(help="The reward at which an episode passes (pass@1, pass rates).")] = 1.0,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="The model's tokenizer (its folder, or a name): an episode's tokens show their text, not ids. Needs transformers."
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="CORRAL_TOKEN",
            help="Answer only requests that carry it: a browser opens /?token=TOKEN once, a script sends 'Authorization: Bearer TOKEN'. Needed for a --host other than loopback. Prefer CORRAL_TOKEN or --token-file: any process here can read a command line.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(help="Read the token from FILE (its first line), so it is on no command line.", dir_okay=False),
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(metavar="RUN,RUN", help="Print the link to these runs overlaid (up to four, named as in DIR)."),
    ] = None,
) -> None:
    """Browse training runs in a local web app: reward over steps, groups, episodes (docs/viewer.md)."""
    from corral.cli.viewer.access import is_loopback
    from corral.cli.viewer.app import create_viewer

    try:
        token = serve_token(
            token, token_file, on_command_line=getattr(ctx.get_parameter_source("token"), "name", "") == "COMMANDLINE"
        )
        if token is None and not is_loopback(host):
            fail(
                f"--host {host} lets other machines read every prompt and transcript of the runs: "
                "give a token with --token-file FILE or CORRAL_TOKEN, or listen on 127.0.0.1"
            )
        opened = "/" if compare is None else _compare_link(compare, [folder, *([rollouts] if rollouts else [])])
        viewer = create_viewer(folder, rollouts, success=success, tokenizer=tokenizer, token=token)
    except ConfigError as error:
        fail(str(error))
    once = ("&" if "?" in opened else "?") + "token=TOKEN (once, then a cookie)"
    typer.echo(f"corral view: http://{host}:{port}{opened}" + (once if token else ""))
    uvicorn.run(viewer, host=host, port=port, log_level="warning")


def _compare_link(runs: str, folders: list[Path]) -> str:
    """The compare page's path for `runs` (RUN,RUN...), each a run recorded in one of `folders`."""
    from urllib.parse import urlencode

    from corral.cli.viewer.pages import COMPARED

    names = [run.strip() for run in runs.split(",") if run.strip()]
    if not 1 <= len(names) <= COMPARED:
        raise ConfigError(f"--compare takes 1 to {COMPARED} runs, comma-separated; it was given {len(names)}")
    missing = [run for run in names if not any((folder / run).is_dir() for folder in folders)]
    if missing:
        known = sorted({p.name for folder in folders if folder.is_dir() for p in folder.iterdir() if p.is_dir()})
        raise ConfigError(
            f"--compare: no run {', '.join(missing)} is recorded here; the runs: {', '.join(known) or 'none'}"
        )
    return "/compare?" + urlencode([("run", run) for run in names])


def eval_command(
    model: Annotated[
        str,
        typer.Argument(
            help="A local HF model's folder, or the URL of a vLLM (OpenAI-compatible, token-in /v1/completions) server.",
            show_default=False,
        ),
    ],
    target: TargetArg,
    split: Annotated[str, typer.Option(help="The split whose tasks to play.")] = "eval",
    k: Annotated[
        int, typer.Option("-k", "--k", min=1, help="Samples per task; pass@k is reported for 1, powers of two and k.")
    ] = 1,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Episodes played at once (the server needs as many sessions).")
    ] = 8,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="The model's tokenizer (default: the model's folder, or the name a server serves)."),
    ] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature; 0 is greedy.")] = 1.0,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0)] = 1.0,
    max_tokens: Annotated[
        int,
        typer.Option(
            min=1,
            help="Ids an episode may reach (sampled and rendered) before it is cut; no further than a local model's context.",
        ),
    ] = 1024,
    max_tool_calls: Annotated[
        int, typer.Option(min=1, help="Calls (end_turn included) an episode may make before it is cut.")
    ] = 8,
    success: Annotated[float, typer.Option(help="The reward at which an episode passes.")] = 1.0,
    limit: Annotated[int | None, typer.Option(min=1, help="Play only the split's first N tasks.")] = None,
    record: Annotated[Path | None, typer.Option(help="Record the episodes (server and tokens) in DIR.")] = None,
    sandbox: Annotated[str, typer.Option(help="A bundle folder's sandbox: auto, docker, local or modal.")] = "auto",
    token: UrlTokenOption = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the numbers as JSON to FILE.")] = None,
    tasks_shown: Annotated[int, typer.Option(min=0, help="Rows of the per-task table.")] = 50,
) -> None:
    """Evaluate a model on a split of a served bundle: k samples per task, pass@k and mean reward
    per task and overall, and why episodes failed or went unscored."""
    try:  # imported here: evaluating needs corral[train] (torch, transformers), serving does not
        from corral.training.evaluation import evaluate
        from corral.training.generation import SamplingParams
    except ImportError as error:
        fail(f"corral eval needs the training extra: pip install 'corral[train]' ({error})")
    refuse_bad_target(target, sandbox)
    with exits_on_refusal(target):
        report = evaluate(
            model,
            target,
            split=split,
            k=k,
            concurrency=concurrency,
            tokenizer=tokenizer,
            sampling=SamplingParams(temperature=temperature, top_p=top_p),
            max_completion_length=max_tokens,
            max_tool_calls=max_tool_calls,
            success=success,
            limit=limit,
            record_dir=record,
            sandbox=sandbox,
            token=token,
        )
    typer.echo(report.table(tasks_shown=tasks_shown))
    if json_out is not None:
        json_out.write_text(json.dumps(report.as_dict(), indent=1))
