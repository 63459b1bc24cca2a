"""Processes that shard the model (FSDP, ZeRO-3) generate in lockstep, however many turns their
episodes take.

Two processes on the CPU (gloo) stand in for two GPUs. Their model's forward takes part in an
all-reduce, as every FSDP forward gathers each layer's parameters from all processes: a process
that runs one forward more than the other waits for it forever (here, until gloo's timeout).
Process 0 plays three episodes of 2, 3 and 1 turns, process 1 one episode of 4, with pauses
where the env answers: the same number of forwards on both is what the batching generator's
lockstep rounds guarantee.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from corral.training.tiny import make_tiny_model

pytestmark = pytest.mark.trl
TURNS = {0: [2, 3, 1], 1: [4]}


def play_on_rank(rank: int, port: int, model_dir: str, results: Any) -> None:
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from corral.training.batching import BatchedGenerator
    from corral.training.generation import SamplingParams

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=30))
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    forward, forwards = model.forward, [0]

    def sharded_forward(*args: Any, **kwargs: Any) -> Any:  # FSDP's all-gather, in miniature
        dist.all_reduce(torch.zeros(1))
        forwards[0] += 1
        return forward(*args, **kwargs)

    model.forward = sharded_forward
    generator = BatchedGenerator(model, SamplingParams(temperature=1.0), pad_token_id=tokenizer.pad_token_id)
    prompt = tokenizer.encode("The agent reads the task and plans a schedule")
    stop = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    samples: list[int] = []

    def episode(turns: int) -> None:
        with generator.episode():
            for turn in range(turns):
                sample = generator.generate(prompt, max_new_tokens=3 + 4 * rank, stop_token_ids=stop)
                samples.append(len(sample.token_ids))
                time.sleep(0.03 * (turn % 2))  # the env answering

    try:
        with generator.playing(len(TURNS[rank])):
            threads = [threading.Thread(target=episode, args=(n,)) for n in TURNS[rank]]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        results.put((rank, len(samples), forwards[0], generator.lockstep))
    finally:
        dist.destroy_process_group()


@pytest.mark.timing
def test_processes_with_different_episodes_generate_in_lockstep(tmp_path: Path) -> None:
    model_dir = str(make_tiny_model(tmp_path / "model"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=play_on_rank, args=(rank, port, model_dir, results)) for rank in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=180)

    assert [process.exitcode for process in ranks] == [0, 0], "a process hung on a collective forward, or failed"
    done = {rank: rest for rank, *rest in (results.get(timeout=5) for _ in ranks)}
    assert done[0][0] == sum(TURNS[0]) and done[1][0] == sum(TURNS[1])  # every turn was served
    assert done[0][1] == done[1][1] and done[0][2] and done[1][2]  # the same forwards, in lockstep
