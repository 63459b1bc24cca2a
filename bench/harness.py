"""The harness capture proxy's cost: the latency it adds to a model call over calling the engine
directly (goal: under 1 ms at p50 on loopback), and the time to build an episode's graph.

    python bench/harness.py [--calls 1000] [--messages 20]

Both the stand-in for vLLM 0.32 (tests/harness_engine.py) and the proxy run on loopback in this
process's threads; calls alternate between the two ways so load on the machine hits both alike.
The direct call sends what the proxy would send (ids and logprobs asked for), so the difference
is the proxy's own work: auth, pinning, one more HTTP hop, reading the ids, keeping the call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' stand-in engine
from corral.protocol.harness.calls import training_sampling
from corral.server.harness.capture import CaptureProxy, HttpUpstream, create_capture_app
from corral.server.harness.request import upstream_body
from tests.harness_engine import MODEL, StandInEngine, serving

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def history(messages: int) -> list[dict]:
    """A conversation of `messages` turns, each a line of a shell session."""
    turns = [{"role": "system", "content": "you fix shell scripts " * 20}]
    for index in range(messages - 1):
        role = "user" if index % 2 == 0 else "assistant"
        turns.append({"role": role, "content": f"step {index}: ran ls -la and read the output " * 8})
    return turns


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="timed calls each way")
    parser.add_argument("--messages", type=int, default=20, help="messages in each call's history")
    args = parser.parse_args()
    engine, proxy = StandInEngine(), CaptureProxy()
    agent_body = {"model": "agent", "messages": history(args.messages), "tools": TOOLS}
    direct_body = upstream_body(agent_body, sampling=training_sampling(1.0), max_tokens=8192, model=MODEL)
    with serving(engine.app()) as engine_url, serving(create_capture_app(proxy)) as proxy_url:
        episode = proxy.open_episode(HttpUpstream(engine_url, model=MODEL), episode_id="bench", temperature=1.0)
        headers = {"Authorization": f"Bearer {episode.key}"}
        route = f"{proxy_url}/episodes/bench/v1/chat/completions"
        with httpx.Client(trust_env=False) as client:
            direct_s, proxied_s = [], []
            for index in range(args.calls + args.calls // 10):  # the first tenth warms both up, untimed
                started = time.perf_counter()
                client.post(engine_url + "/v1/chat/completions", json=direct_body).raise_for_status()
                middle = time.perf_counter()
                client.post(route, json=agent_body, headers=headers).raise_for_status()
                ended = time.perf_counter()
                if index >= args.calls // 10:
                    direct_s.append(middle - started)
                    proxied_s.append(ended - middle)
        capture = proxy.close_episode("bench")
    started = time.perf_counter()
    summary = capture.summary()
    graph_s = time.perf_counter() - started
    added = [proxied - direct for proxied, direct in zip(proxied_s, direct_s, strict=True)]
    ms = 1000
    figures = {
        "calls": args.calls,
        "messages_per_call": args.messages,
        "prompt_tokens": len(engine.sampled[-1].prompt_token_ids),
        "direct_ms": {"p50": percentile(direct_s, 0.5) * ms, "p99": percentile(direct_s, 0.99) * ms},
        "proxied_ms": {"p50": percentile(proxied_s, 0.5) * ms, "p99": percentile(proxied_s, 0.99) * ms},
        "added_ms": {
            "p50": percentile(added, 0.5) * ms,
            "p99": percentile(added, 0.99) * ms,
            "mean": statistics.fmean(added) * ms,
        },
        "graph_of_all_calls_ms": graph_s * ms,
        "captured_calls": summary.calls,
        "capture_level": summary.level,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
