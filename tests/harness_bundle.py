"""The harness tests' bundle (tests/fixtures/harnessbox) and how they play it: a reset naming
the stand-in engine, then `run_agent`, which ends the episode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from corral.protocol.frames import CallToolObservation
from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import FIXTURES
from tests.harness_engine import MODEL, StandInEngine
from tests.wire import called, opened, ws

TEMPERATURE = 0.7


class Harness:
    """A server of harnessbox and the stand-in engine its episodes are reset to call."""

    def __init__(self, server: EmbeddedServer, engine: StandInEngine, engine_url: str) -> None:
        self.server, self.engine, self.engine_url = server, engine, engine_url

    def reset(self, task_id: str) -> dict[str, Any]:
        return {"task_id": task_id, "llm_url": self.engine_url, "model": MODEL, "temperature": TEMPERATURE}

    def run(self, task_id: str) -> CallToolObservation:
        with ws(self.server) as socket:
            first = opened(socket, **self.reset(task_id))
            assert [tool.name for tool in first.offered_tools] == ["look", "run_agent", "end_turn"]
            return called(socket, "run_agent")


def copied_bundle(root: Path, engine_port: int, python: str | None = None) -> Path:
    """harnessbox in `root`, the engine's port told to its agent (which tries it, and must fail);
    with `python`, its env and agent run by that Python (the local sandbox sees the test's,
    which has openai) rather than the image's python3."""
    bundle = root / "harnessbox"
    shutil.copytree(FIXTURES / "harnessbox", bundle)
    env_toml = bundle / "envs/agentic/env.toml"
    text = env_toml.read_text()
    if python is not None:
        text = text.replace('"python3"', json.dumps(python)).replace(
            'entry = "env:Workspace"', f'command = [{json.dumps(python)}, "-m", "corral.env", "env:Workspace"]'
        )
    env_toml.write_text(text + f'environment = {{ ENGINE_PORT = "{engine_port}" }}\n')
    return bundle
