"""OpenEnv's Task API over the bundle's splits, plus corral's `/toolsets`.

The client builds its datasets and environment classes from these routes alone.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from corral.client.protocol import TaskInfo
from corral.server.served import ServedBundle


class SplitRequest(BaseModel):
    split: str = "all"


class TaskRequest(SplitRequest):
    index: int = Field(ge=0)


class RangeRequest(SplitRequest):
    start: int | None = Field(default=None, ge=0)
    stop: int | None = Field(default=None, ge=0)


def task_router(served: ServedBundle) -> APIRouter:
    router = APIRouter()
    splits = served.bundle.splits

    def check_env(env_name: str) -> None:
        if env_name.lower() != served.name.lower():
            raise HTTPException(404, f"no environment {env_name!r}; this server serves {served.name!r}")

    def tasks_of(env_name: str, split: str) -> list[Any]:
        check_env(env_name)
        if split not in splits:
            raise HTTPException(404, f"no split {split!r}; the splits are: {', '.join(splits)}")
        return splits[split]

    def infos(split: str, start: int, stop: int) -> list[TaskInfo]:
        return [served.task_info(split, index) for index in range(start, stop)]

    @router.get("/list_environments")
    def list_environments() -> list[str]:
        return [served.name]

    @router.get("/{env_name}/splits")
    def list_splits(env_name: str) -> dict[str, Any]:
        check_env(env_name)
        return {
            "env_name": served.name,
            "splits": [{"name": name, "type": name, "num_tasks": len(tasks)} for name, tasks in splits.items()],
        }

    @router.post("/{env_name}/tasks")
    def list_tasks(env_name: str, request: SplitRequest) -> dict[str, Any]:
        tasks = tasks_of(env_name, request.split)
        return {"env_name": served.name, "tasks": infos(request.split, 0, len(tasks))}

    @router.post("/{env_name}/num_tasks")
    def num_tasks(env_name: str, request: SplitRequest) -> dict[str, int]:
        return {"num_tasks": len(tasks_of(env_name, request.split))}

    @router.post("/{env_name}/task")
    def get_task(env_name: str, request: TaskRequest) -> dict[str, TaskInfo]:
        tasks = tasks_of(env_name, request.split)
        if request.index >= len(tasks):
            raise HTTPException(400, f"split {request.split!r} has {len(tasks)} tasks; index {request.index} is past its end")
        return {"task": served.task_info(request.split, request.index)}

    @router.post("/{env_name}/task_range")
    def get_task_range(env_name: str, request: RangeRequest) -> dict[str, list[TaskInfo]]:
        tasks = tasks_of(env_name, request.split)
        start, stop = request.start or 0, min(request.stop if request.stop is not None else len(tasks), len(tasks))
        return {"tasks": infos(request.split, start, max(start, stop))}

    @router.get("/toolsets")
    def toolsets() -> dict[str, Any]:
        """corral's extension: each toolset's tools, so a client can build its environment classes."""
        return {"toolsets": [toolset.model_dump(by_alias=True) for toolset in served.toolsets.values()]}

    return router
