"""What every recipe shares: the model and server arguments, the `--tiny` mode, opening the bundle.

`--server` takes a corral server's URL (`http://env-host:8000`, as a trainer on a GPU box uses
it) or a bundle folder, which is then served in this process (`Bundle.local`), as on a laptop.
`--tiny` makes a tiny random Qwen3-style model here (`corral.training.tiny`) and serves
`bundles/gridsim` locally, so a recipe runs end to end on a CPU without downloading anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

REPO = Path(__file__).resolve().parent.parent
GRIDSIM = REPO / "bundles" / "gridsim"
_STARTED = time.monotonic()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every recipe takes."""
    parser.add_argument("--model", help="model id or folder (e.g. Qwen/Qwen3-4B); required unless --tiny")
    parser.add_argument(
        "--server",
        default=str(GRIDSIM),
        help="a corral server's URL, or a bundle folder to serve in-process (default: %(default)s)",
    )
    parser.add_argument("--token", help="bearer token, if the server asks for one")
    parser.add_argument("--split", default="train", help="the split to train on (default: %(default)s)")
    parser.add_argument("--output-dir", type=Path, default=Path("out"), help="(default: %(default)s)")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="run on this CPU with a tiny model made here, a few rows and one or two steps",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--record",
        type=Path,
        metavar="DIR",
        help="record the run in DIR, with the model's tokenizer, to browse with `corral view DIR`",
    )


def resolve_model(opts: argparse.Namespace) -> str:
    """The model to train: `--model`, or with `--tiny` (and no `--model`) a tiny one made now."""
    if opts.model:
        return opts.model
    if not opts.tiny:
        sys.exit("error: pass --model (a model id or folder, e.g. Qwen/Qwen3-4B), or --tiny to try the recipe on a CPU")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from corral.training.tiny import make_tiny_model

    path = make_tiny_model(opts.output_dir / "tiny-model", seed=opts.seed)
    say(f"made a tiny model in {path}")
    return str(path)


def open_bundle(opts: argparse.Namespace, **local_options):
    """The bundle at `--server`: a URL is opened as it is; a folder is served in this process."""
    from corral.client import Bundle

    if "://" in opts.server:  # the environments record their episodes; the server, with `corral serve --record`
        bundle = Bundle(opts.server, split=opts.split, token=opts.token, record_dir=opts.record)
    elif Path(opts.server).is_dir():
        bundle = Bundle.local(opts.server, split=opts.split, record_dir=opts.record, **local_options)
    else:
        sys.exit(f"error: --server {opts.server!r} is neither a URL (http://host:port) nor a bundle folder")
    say(f"opened {bundle!r}")
    return bundle


def keep_tokenizer(opts: argparse.Namespace, model: str) -> None:
    """With --record, the model's tokenizer beside the records: `corral view` shows its text."""
    if opts.record is None:
        return
    from transformers import AutoTokenizer

    from corral.client.run_headers import TOKENIZER

    AutoTokenizer.from_pretrained(model).save_pretrained(opts.record / TOKENIZER)
    say(f"recording in {opts.record}: browse it with `corral view {opts.record}`")


def say(message: str) -> None:
    """Print a progress line, with the seconds since the recipe started."""
    print(f"[{time.monotonic() - _STARTED:6.1f}s] {message}", flush=True)


def run_training(trainer, *, tiny: bool) -> None:
    """`trainer.train()`; with --tiny on one torch thread, since torch's threads crawl on a shared CPU."""
    if not tiny:
        trainer.train()
        return
    from corral.training.cpu import one_cpu_thread

    with one_cpu_thread():
        trainer.train()


def lora_config():
    """LoRA on every linear layer of the attention and MLP blocks, rank 32: enough capacity to learn a
    tool-call format and a schedule without touching the base weights vLLM keeps serving."""
    try:
        from peft import LoraConfig
    except ImportError:
        sys.exit("error: --lora needs peft: pip install peft (or corral[train])")
    return LoraConfig(r=32, lora_alpha=64, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
