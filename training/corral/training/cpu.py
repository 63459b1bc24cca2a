"""Torch on a shared CPU: the tiny model's runs, the recipes' --tiny mode and `corral eval` of a
model on the CPU sample on one thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_cpu_thread() -> Iterator[None]:
    """Run torch on one CPU thread inside the block.

    A small model gains nothing from more threads, and when other processes load the CPUs,
    torch's spinning worker threads slow it down several times to fiftyfold (seconds become
    minutes).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
