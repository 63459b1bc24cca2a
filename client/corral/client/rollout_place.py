"""Where an environment's episode sits in the AsyncGRPO run that plays it: its group, its index
in the group and the policy version, read from TRL's rollout loop.

TRL's AsyncGRPO builds environments in a spawned rollout process (`_AsyncRolloutLoop`) and hands
them no handle on it. That loop resets one environment per generation, one reset at a time, in
the order its `_repeat_iterator` yields rows: each row `num_generations` times in a row, the
groups numbered from 0. So the process's n-th reset is member `n % size` of group `n // size`,
as TRL numbers its `RolloutSample.group_id`. The policy version is the loop's `model_version`
(TRL raises it at each weight sync: with the default `weight_sync_steps=1`, the trainer's step),
read at the group's first reset, as TRL reads it for the group. Anywhere else (GRPOTrainer, a notebook) no
loop is found and the place is unknown.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

from corral.protocol.records import TrainingContext

_LOOP_MODULE = "trl.experimental.async_grpo.async_rollout_worker"
_LOOP_CLASS = "_AsyncRolloutLoop"

_lock = threading.Lock()
_resets = 0  # this process's resets under the loop, in the order the loop made them
_group_version = 0  # the policy version of the group being reset
_loop: Any = None


def next_place() -> TrainingContext:
    """The place of the reset being made now: call once per reset, from the reset."""
    global _resets, _group_version
    loop = rollout_loop()
    if loop is None:
        return TrainingContext()
    size = _generations(loop)
    with _lock:
        number, _resets = _resets, _resets + 1
        if number % size == 0:
            _group_version = int(loop.model_version)
        version = _group_version
    return TrainingContext(step=version, policy_version=version, group=number // size, group_index=number % size)


def group_size() -> int | None:
    """How many rollouts TRL samples per prompt, under its loop."""
    loop = rollout_loop()
    return None if loop is None else _generations(loop)


def _generations(loop: Any) -> int:
    return max(int(loop.num_generations), 1)


def rewards_are_environments() -> bool:
    """Whether TRL's reward is the environments' alone (no reward function, no rollout reward of
    a subclass), so that its advantage can be computed from theirs."""
    loop = rollout_loop()
    return loop is not None and not loop.reward_funcs and not getattr(loop, "_provides_rollout_reward", False)


def rollout_loop() -> Any:
    """TRL's AsyncGRPO rollout loop running this process, or None. Its main thread runs the
    loop's `run` (`_child_main`), so that frame's `self` is the loop; found once, then kept."""
    global _loop
    if _loop is None:
        module = sys.modules.get(_LOOP_MODULE)  # not imported: no AsyncGRPO here, and no TRL to import
        loop_class = getattr(module, _LOOP_CLASS, None)
        main = sys._current_frames().get(threading.main_thread().ident or 0)
        if loop_class is not None and main is not None:
            _loop = _self_of_type(main, loop_class)
    return _loop


def _self_of_type(frame: FrameType | None, kind: type) -> Any:
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, kind):
            return candidate
        frame = frame.f_back
    return None
