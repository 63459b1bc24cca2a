"""`evaluate`: a model over a split of a served bundle, `k` samples per task: pass@k and mean
reward per task and overall, and why episodes failed or went unscored. `corral eval` is this,
from the command line.

    report = evaluate("out/sft", "bundles/codeword", split="eval", k=4, concurrency=16)
    print(report.table())
    report.pass_at[4], report.mean_reward, report.unscored_reasons

The model is a local HF model (a folder, or a model already in memory with its tokenizer), or
any server that answers vLLM's token-in `/v1/completions` (a URL). Episodes are played
token-exact, as `CorralRollout` plays them for a trainer: the same rendering, tool calls and
server rewards. An episode the agent made fail counts as a miss with its failure score; one the
platform left unscored is left out of the numbers and listed with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.client import Bundle
from corral.client.run_headers import end_header, write_header
from corral.errors import ConfigError
from corral.protocol.records import RunHeader
from corral.training.batching import BatchedGenerator
from corral.training.cpu import one_cpu_thread
from corral.training.eval_report import EvalReport, report_of
from corral.training.generation import Generator, SamplingParams, VLLMGenerator, eos_token_ids
from corral.training.processors import HermesProcessor, Processor
from corral.training.rollouts import CorralRollout
from corral.training.run_context import checkpoint_step, group_contexts


def evaluate(
    model: Any,
    bundle: Bundle | str | Path,
    *,
    split: str = "eval",
    k: int = 1,
    concurrency: int = 8,
    tokenizer: Any = None,
    processor: Processor | None = None,
    sampling: SamplingParams | None = None,
    max_completion_length: int = 1024,
    max_tool_calls: int = 8,
    success: float = 1.0,
    limit: int | None = None,
    record_dir: str | Path | None = None,
    progress: bool = True,
    sandbox: str = "auto",
    chat_template_kwargs: dict[str, Any] | None = None,
    token: str | None = None,
) -> EvalReport:
    """Play `k` episodes of every task of `split` with `model`, and score them.

    Args:
        model: A local HF model's folder; a model in memory (pass its `tokenizer`); or the URL of
            a server answering vLLM's token-in `/v1/completions` (its tokenizer: `tokenizer`, or
            the name it serves, loaded with `AutoTokenizer`).
        bundle: A `Bundle`, a corral server's URL, or a bundle folder (served in this process).
        split: The split whose tasks to play.
        k: Samples per task; pass@k is reported for 1, powers of two and k.
        concurrency: Episodes played at once (the server needs as many sessions).
        tokenizer: The model's tokenizer (a folder, a name, or the object).
        processor: The chat template's processor; by default Qwen's (Hermes tool calls).
        sampling: Temperature, top-p, top-k (temperature 0: greedy); by default 1, 1, none.
        max_completion_length: Ids an episode may reach (sampled and rendered) before it is cut.
        max_tool_calls: Calls (end_turn included) an episode may make before it is cut.
        success: The reward at which an episode passes.
        limit: Play only the split's first `limit` tasks.
        record_dir: Record the rollouts there (and, for a bundle folder, the server's episodes).
        progress: Show a progress bar on stderr.
        sandbox: A bundle folder's sandbox (auto, docker, local).
        chat_template_kwargs: The chat template's variables; by default thinking off.
        token: A corral server's bearer token; by default `$CORRAL_TOKEN`.

    A local model on the CPU samples on one torch thread (`cpu.one_cpu_thread`), and each sample
    stops where the model's context ends, whatever `max_completion_length` allows.
    """
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()  # the dataset's map bars would cut through the episodes' bar
    policy = _policy(model, tokenizer, sampling or SamplingParams())  # first: a model that does not load fails fast
    try:
        opened = _open_bundle(bundle, split, sandbox, concurrency, record_dir, token)
    except BaseException:
        policy.restore()
        raise
    step = checkpoint_step(model)  # the records' step: a checkpoint's, when the model is one
    try:
        processor = processor or HermesProcessor.for_trainer(
            policy.tokenizer, chat_template_kwargs or {"enable_thinking": False}, stop_token_ids=policy.eos_ids
        )
        rollout = CorralRollout(
            opened,
            processor=processor,
            generator=policy.generator,
            max_tool_calls=max_tool_calls,
            max_completion_length=max_completion_length,
            record_dir=record_dir,
        )
        header = None
        if rollout.records is not None:  # what this run is: an eval, of a checkpoint's step when the model is one
            header = RunHeader(
                run=rollout.records.run, kind="eval", model=policy.name, bundle=opened.name, split=split, step=step
            )
            write_header(rollout.records.root, header)
        rows = rollout.dataset_for(split)
        if limit is not None:
            rows = rows.select(range(min(limit, len(rows))))
        prompts = [row["prompt"] for row in rows for _ in range(k)]
        bar = _bar(len(prompts), f"eval {split}") if progress else None
        started = time.monotonic()
        try:
            with policy.threads():
                played = rollout.play(
                    prompts,
                    concurrency=concurrency,
                    contexts=group_contexts(len(prompts), k, step),
                    on_rollout=(lambda _: bar.update(1)) if bar is not None else None,
                )
        finally:
            policy.restore()
            if bar is not None:
                bar.close()
            run = rollout.records.run if rollout.records is not None else None
            if header is not None and rollout.records is not None:
                end_header(rollout.records.root, header)
            rollout.close()
        report = report_of(
            played,
            [row["task_id"] for row in rows],
            name=policy.name,
            bundle=opened.name,
            split=split,
            k=k,
            success=success,
            seconds=time.monotonic() - started,
            run=run,
        )
        report.served_run = opened.served_run
        report.context_length = policy.context_length
        if report.context_length is not None:
            report.context_cut = sum(len(r.prompt_ids) + len(r.completion_ids) >= report.context_length for r in played)
        return report
    finally:
        if opened is not bundle:
            opened.close()


def _open_bundle(
    bundle: Bundle | str | Path,
    split: str,
    sandbox: str,
    concurrency: int,
    record_dir: str | Path | None,
    token: str | None,
) -> Bundle:
    if isinstance(bundle, Bundle):
        return bundle
    if isinstance(bundle, str) and "://" in bundle:
        return Bundle(bundle, split=split, token=token)
    return Bundle.local(bundle, split=split, sandbox=sandbox, max_concurrent_envs=concurrency, record_dir=record_dir)


@dataclass
class _Policy:
    """What samples: the generator, the model's tokenizer, name and EOS ids, what to undo after,
    the torch threads to sample with (one, for a model on the CPU) and the model's context."""

    generator: Generator
    tokenizer: Any
    name: str
    eos_ids: list[int]
    restore: Any
    threads: Callable[[], AbstractContextManager[None]] = nullcontext
    context_length: int | None = None  # a local model's: its samples stop there


def _policy(model: Any, tokenizer: Any, sampling: SamplingParams) -> _Policy:
    if isinstance(model, str) and "://" in model:
        server = VLLMGenerator(model, sampling=sampling)
        server.tokenizer = tokenizer = _tokenizer(tokenizer or server.model)  # also reads a server that answers text
        # vLLM stops on every EOS id of the model's generation config: each must end a turn here too.
        eos_ids = eos_token_ids(tokenizer.name_or_path, tokenizer)
        return _Policy(server, tokenizer, f"{server.model} at {server.base_url}", eos_ids, server.close)
    if isinstance(model, str | Path):
        name = str(model)
        model, tokenizer = _load(name, tokenizer)
    elif tokenizer is None:
        raise ValueError("evaluate(model=...) with a model in memory needs its tokenizer: pass tokenizer=")
    else:
        name, tokenizer = getattr(model, "name_or_path", type(model).__name__), _tokenizer(tokenizer)
    eos_ids = eos_token_ids(model, tokenizer)
    was_training = model.training
    model.eval()
    generator = BatchedGenerator(
        model, sampling, logprobs=False, pad_token_id=tokenizer.pad_token_id, max_batch=256, lockstep=False
    )
    on_cpu = next(model.parameters()).device.type == "cpu"
    return _Policy(
        generator,
        tokenizer,
        name,
        eos_ids,
        lambda: model.train(was_training),
        one_cpu_thread if on_cpu else nullcontext,
        generator.context_length,
    )


def _load(name: str, tokenizer: Any) -> tuple[Any, Any]:
    """The model saved at `name` (a folder, or a model in the Hugging Face cache) and its
    tokenizer; ConfigError, in one line saying what to pass, when either does not load."""
    from transformers import AutoModelForCausalLM
    from transformers.utils.logging import disable_progress_bar

    disable_progress_bar()  # its loading bar would stand between the eval's own bar, or its one-line error
    folder = Path(name)
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise ConfigError(
            f"{name} is a folder but not a saved model (it has no config.json): give the folder a "
            "model was saved in (save_pretrained, a recipe's --output-dir) or a vLLM server's URL"
        )
    try:
        tokenizer = _tokenizer(tokenizer or name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    except (OSError, ValueError) as error:
        where = "" if folder.exists() else f"there is no folder {folder.resolve()}, and "
        raise ConfigError(
            f"cannot load the model {name!r}: {where}transformers says: {_first_line(error)}; give a "
            "saved model's folder or a vLLM server's URL"
        ) from error
    # transformers' decorator on `to` types it as taking the model again: a wrong hint.
    return model.to("cuda" if _cuda() else "cpu"), tokenizer  # type: ignore[arg-type]


def _tokenizer(source: Any) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(source)) if isinstance(source, str | Path) else source


def _first_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def _bar(total: int, label: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=label, unit="episode", dynamic_ncols=True)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
