"""The trainer's weights pushed to a vLLM server through a file, where TRL's sync cannot run.

TRL keeps a `trl vllm-serve` server in step with a GRPOTrainer over NCCL, which needs a GPU on
both sides: a CPU trainer (a test box, CI) is refused. There, `FileWeightSync` writes the weights
to a folder the server reads (safetensors, as `save_pretrained` writes them) and asks vLLM to
reload them in place (its workers' `reload_weights`, through `/collective_rpc`), then empties its
prefix cache, whose keys and values the old weights computed. Use it only where NCCL is not
available: it is slow for a large model, and needs

- a server started with `VLLM_SERVER_DEV_MODE=1` (which opens `/collective_rpc` and
  `/reset_prefix_cache`; keep such a server on loopback or a private network);
- the folder on a disk the server reads (the same machine, or a shared disk);
- an untied model: with tied embeddings, vLLM on CPU keeps its old output head.

    sync = FileWeightSync("http://127.0.0.1:8000", "/tmp/corral-weights")
    rollout = CorralRollout(env, generator=VLLMGenerator(sync.base_url), weight_sync=sync)
    # GRPOConfig(use_vllm=False, ...): the trainer samples through the rollout_func, which
    # pushes the weights before each generation that follows an update.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from corral.errors import GenerationError, ServerUnreachable


class FileWeightSync:
    """Pushes a model's weights to the vLLM server at `base_url` through `folder`.

    Args:
        base_url: The vLLM server, e.g. `http://127.0.0.1:8000`.
        folder: Where to write the weights; the server must read the same path.
        timeout: Seconds the server may take to reload.
    """

    def __init__(self, base_url: str, folder: str | Path, timeout: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.folder = Path(folder)
        self.timeout = timeout
        self.pushed_step: int | None = None  # the trainer step whose weights the server holds

    def push(self, model: Any) -> None:
        """Write `model`'s weights and have the server serve them from its next request on."""
        if getattr(model.config, "tie_word_embeddings", False):
            raise GenerationError(
                "FileWeightSync cannot sync a model with tied embeddings: vLLM on CPU keeps its old output "
                "head on reload; train an untied model (tie_word_embeddings=False)"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(self.folder, safe_serialization=True)
        self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(self.folder)}})
        self._post("/reset_prefix_cache", None)

    def push_for_step(self, model: Any, step: int) -> None:
        """Push unless the server already holds the weights of trainer step `step`."""
        if self.pushed_step != step:
            self.push(model)
            self.pushed_step = step

    def _post(self, path: str, body: dict[str, Any] | None) -> None:
        try:
            reply = httpx.post(f"{self.base_url}{path}", json=body, timeout=self.timeout, trust_env=False)
        except httpx.HTTPError as error:
            raise ServerUnreachable(f"could not reach the vLLM server at {self.base_url}: {error}") from None
        if reply.status_code == 404:
            raise GenerationError(
                f"the vLLM server at {self.base_url} has no {path}: start it with "
                "VLLM_SERVER_DEV_MODE=1 to sync weights through a file"
            )
        if reply.status_code != 200:
            raise GenerationError(
                f"the vLLM server at {self.base_url} refused {path} ({reply.status_code}): {reply.text[:500]}"
            )
