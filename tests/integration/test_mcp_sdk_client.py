"""corral's env runtime as the official MCP SDK's stdio client sees it: GridSim, served by
`python3 -m corral.env env:GridSim`, driven by mcp 1.x's `ClientSession`. corral's hooks are
custom requests to that client, as any other MCP client would send them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, types  # mcp 1.x, from the dev extra
from mcp.client.stdio import stdio_client
from pydantic import BaseModel, ConfigDict

REPO = Path(__file__).resolve().parents[2]
GRIDSIM = REPO / "bundles" / "gridsim"


class HookRequest(BaseModel):
    """A request outside MCP's typed API: one of corral's hooks."""

    method: str
    params: dict[str, Any] | None = None


class HookResult(types.Result):
    model_config = ConfigDict(extra="allow")


def first_task_args() -> dict:
    with open(GRIDSIM / "tasks.jsonl") as tasks:
        return json.loads(tasks.readline())["args"]


def test_the_mcp_sdk_client_plays_gridsim_through_corral_s_runtime():
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "corral.env", "env:GridSim"],
        cwd=GRIDSIM / "envs" / "gridsim",
        env={**os.environ, "PYTHONPATH": str(REPO / "sandboxes")},
    )
    seen: dict[str, Any] = {}

    async def play() -> None:
        with anyio.fail_after(30):
            await steps()

    async def steps() -> None:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            seen["init"] = await session.initialize()
            seen["tools"] = await session.list_tools()
            reset = HookRequest(method="corral/reset", params={"task": first_task_args()})
            seen["reset"] = await session.send_request(reset, HookResult)
            seen["idle"] = await session.call_tool("submit_schedule", {"actions": [0] * 24})
            seen["bad"] = await session.call_tool("submit_schedule", {"actions": "idle"})
            seen["unknown"] = await session.call_tool("charge", {})
            report = HookRequest(method="corral/report")
            seen["report"] = await session.send_request(report, HookResult)

    anyio.run(play)

    init = seen["init"]
    assert init.protocolVersion == types.LATEST_PROTOCOL_VERSION  # the client's own, echoed
    assert init.serverInfo.name == "GridSim"
    assert init.capabilities.tools is not None
    hooks = ["corral/reset", "corral/end_turn", "corral/report", "corral/run_agent"]
    assert init.capabilities.experimental == {"corral": {"hooks": hooks}}
    assert [tool.name for tool in seen["tools"].tools] == ["submit_schedule"]
    assert seen["tools"].tools[0].inputSchema["required"] == ["actions"]

    idle = seen["idle"]
    assert idle.isError is False
    assert idle.structuredContent["submitted"] is True
    assert idle.structuredContent["profit_usd"] == 0.0
    assert json.loads(idle.content[0].text) == idle.structuredContent

    assert seen["bad"].isError is True
    assert seen["bad"].meta == {"corral/error_type": "invalid_args"}
    assert seen["unknown"].isError is True
    assert seen["unknown"].meta == {"corral/error_type": "tool_not_found"}
    assert seen["report"].model_extra["report"]["actions"] == [0] * 24
