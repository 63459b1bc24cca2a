"""OpenEnv's Task API over the bundle's splits, plus corral's `/toolsets`.

The client builds its datasets and environment classes from these routes alone. As OpenEnv's:
`split` is required and unknown keys are refused (422); indices follow Python's, negative ones
included; an index out of range is 400.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict

from corral.protocol.catalog import SplitInfo, TaskInfo
from corral.server.serving.served import ServedBundle

OPENENV_SPLIT_TYPES: dict[str, Literal["train", "validation", "test"]] = {
    "train": "train",
    "validation": "validation",
    "test": "test",
}


class SplitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: str


class TaskRequest(SplitRequest):
    index: int


class RangeRequest(SplitRequest):
    start: int | None = None
    stop: int | None = None


def task_router(served: ServedBundle) -> APIRouter:
    """OpenEnv's Task API routes over `served`'s splits (the env is the bundle), and `/toolsets`."""
    router = APIRouter()
    splits = served.bundle.splits

    def indices(env_name: str, split: str) -> range:
        """The split's task indices, once the env and split names check out."""
        if env_name.lower() != served.name.lower():
            raise HTTPException(404, f"unknown environment {env_name!r}; this server serves {served.name!r}")
        if split not in splits:
            raise HTTPException(404, f"no split {split!r}; the splits are: {', '.join(splits)}")
        return range(len(splits[split]))

    @router.get("/list_environments")
    def list_environments() -> list[str]:
        return [served.name]

    @router.get("/{env_name}/splits")
    def list_splits(env_name: str) -> list[SplitInfo]:
        """OpenEnv's split list: `{name, type}` each (a name that is not one of OpenEnv's types
        is a `validation` split, as OpenEnv reads it), plus its number of tasks."""
        indices(env_name, "all")
        return [
            SplitInfo(name=name, type=OPENENV_SPLIT_TYPES.get(name, "validation"), num_tasks=len(tasks))
            for name, tasks in splits.items()
        ]

    @router.post("/{env_name}/tasks")
    def list_tasks(env_name: str, request: SplitRequest) -> dict[str, Any]:
        tasks = [served.task_info(request.split, i) for i in indices(env_name, request.split)]
        return {"env_name": served.name, "tasks": tasks}

    @router.post("/{env_name}/num_tasks")
    def num_tasks(env_name: str, request: SplitRequest) -> dict[str, int]:
        return {"num_tasks": len(indices(env_name, request.split))}

    @router.post("/{env_name}/task")
    def get_task(env_name: str, request: TaskRequest) -> dict[str, TaskInfo]:
        found = indices(env_name, request.split)
        try:
            index = found[request.index]
        except IndexError:
            raise HTTPException(
                400,
                f"Invalid task index: split {request.split!r} has {len(found)} tasks; "
                f"index {request.index} is outside -{len(found)}..{len(found) - 1}",
            ) from None
        return {"task": served.task_info(request.split, index)}

    @router.post("/{env_name}/task_range")
    def get_task_range(env_name: str, request: RangeRequest) -> dict[str, list[TaskInfo]]:
        found = indices(env_name, request.split)[request.start : request.stop]
        return {"tasks": [served.task_info(request.split, i) for i in found]}

    @router.get("/toolsets")
    def toolsets() -> dict[str, Any]:
        """corral's extension: each toolset's tools, so a client can build its environment classes."""
        return {"toolsets": [toolset.model_dump(by_alias=True) for toolset in served.toolsets.values()]}

    return router
