"""How much of corral one episode crosses: the server-side files and functions that its reset,
a tool call and its end run, on gridsim in the local sandbox (issue 37's measure of the floor
plan: a newcomer follows an episode through these).

    python bench/episode_trace.py [--bundle bundles/gridsim]

The server runs in this process (`Bundle.local`); a profiler hook on every thread notes each
corral function called under server/ and sandboxes/, by phase. Run it on two checkouts to compare.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections import defaultdict
from pathlib import Path

from corral.client import Bundle

REPO = Path(__file__).resolve().parents[1]
SERVER_SIDE = tuple(str(REPO / root) for root in ("server", "sandboxes"))


class Tracer:
    """Functions called under SERVER_SIDE, by phase: `phase` is set before each step."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.seen: dict[str, set[tuple[str, str]]] = defaultdict(set)

    def __call__(self, frame, event, _arg):
        if event == "call" and frame.f_code.co_filename.startswith(SERVER_SIDE):
            path = str(Path(frame.f_code.co_filename).relative_to(REPO))
            self.seen[self.phase].add((path, frame.f_code.co_qualname))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", default=str(REPO / "bundles" / "gridsim"))
    args = parser.parse_args()
    tracer = Tracer()
    threading.setprofile(tracer)  # the embedded server's thread, started next, runs under it
    bundle = Bundle.local(args.bundle, split="train", sandbox="local")
    try:
        row = bundle.dataset[0]
        environment = bundle.factory()
        environment.reset(**row)  # a first episode warms imports and pools: not counted
        tracer.seen.clear()
        sys.setprofile(tracer)
        tracer.phase = "reset"
        environment.reset(**row)
        tracer.phase = "tool call"
        tool = environment._corral_spec.toolset.tools[0]
        getattr(environment, tool.name)(**example_arguments(tool.input_schema))
        tracer.phase = "end"
        environment.get_reward()  # ends the turn the model left open: the verifiers score it
        tracer.phase = "done"
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        bundle.close()
    print(f"{'phase':<10} {'files':>6} {'functions':>10}")
    everything: set[tuple[str, str]] = set()
    for phase in ("reset", "tool call", "end"):
        calls = tracer.seen[phase]
        everything |= calls
        print(f"{phase:<10} {len({path for path, _ in calls}):>6} {len(calls):>10}")
    files = sorted({path for path, _ in everything})
    print(f"{'episode':<10} {len(files):>6} {len(everything):>10}")
    print("\n".join(files))


def example_arguments(input_schema: dict) -> dict:
    """Arguments the tool's schema accepts (the env may refuse them: the call is what is traced)."""
    schema = input_schema.get("properties", {})
    samples = {"integer": 0, "number": 0.0, "string": "x", "boolean": False, "array": [0] * 24, "object": {}}
    return {name: samples.get(spec.get("type"), None) for name, spec in schema.items()}


if __name__ == "__main__":
    main()
