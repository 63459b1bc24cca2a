"""Harness episodes for TRL 1.16's `HarnessRolloutWorker`: the agent runs its own loop in the
env host's sandbox, and the trainer gets each episode's captured calls as a `TrainingTrace`.

    from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker
    from corral.client import Bundle
    from corral.training.harness import HarnessSessions

    bundle = Bundle("http://env-host:8000", split="train")
    sessions = HarnessSessions(bundle.url, llm_url="http://gpu-box:8000", model="Qwen/Qwen3-0.6B")
    worker = HarnessRolloutWorker(harness_session_factory=sessions, dataset=bundle.dataset, ...)

`HarnessSessions` is what TRL calls `harness_session_factory`: picklable (the worker runs in a
spawned process, which calls it once with the trainer's sampling); what it returns makes one
`HarnessRun` per rollout. A run resets the task whose prompt TRL hands it (the dataset row's;
by the group's seed where the prompt names no task), then plays the env's `run_agent` tool in
a thread of its own: the server runs the agent in the sandbox, captures its model calls, scores
the episode, and answers with the capture. TRL reads it with `fetch_training_trace()` and the
reward with `verify(...)`.

An unscored episode (the platform at fault) gives TRL no trace: the rollout is dropped. After
`max_unscored_in_a_row` of them the next trace fetch raises `PlatformFailing`, which TRL treats
as a broken capture contract and stops training, naming the cause: hours of silently
unscorable rollouts (trl#6683) end at once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corral.client import Bundle
from corral.client.episode import Episode
from corral.client.session import Session
from corral.errors import ConfigError, CorralError
from corral.protocol.frames import ResetData

RUN_AGENT = "run_agent"
CLOSE_WAIT_S = 10.0  # TRL kills its worker 15 s after asking every session to close


class PlatformFailing(CorralError, ValueError):
    """Too many harness episodes in a row ended unscored by the platform's fault. A ValueError,
    so that TRL's worker takes it for a broken capture contract and stops training."""


@dataclass(frozen=True)
class HarnessSessions:
    """TRL's `harness_session_factory` for a served bundle's harness envs.

    Args:
        url: the server (or servers, comma-separated) serving the bundle.
        split: the split whose tasks are played.
        llm_url: the engine the env host calls for the agent's model calls (vLLM's OpenAI server).
        model: the served model's name, sent whatever name the agent uses.
        token: the server's bearer token, if it asks for one.
        max_unscored_in_a_row: unscored episodes in a row before training is stopped.
    """

    url: str
    split: str = "train"
    llm_url: str | None = None
    model: str | None = None
    token: str | None = None
    max_unscored_in_a_row: int = 8

    def __post_init__(self) -> None:
        if self.llm_url is not None and self.model is None:
            raise ConfigError(
                f"HarnessSessions(llm_url={self.llm_url!r}) names no model: give model= the trained model's name as "
                "that engine serves it (else each agent's own model name is sent)"
            )

    def __call__(self, sampling: Mapping[str, Any] | None = None) -> HarnessRunFactory:
        temperature = float((sampling or {}).get("temperature", 1.0))
        return HarnessRunFactory(self, Bundle(self.url, split=self.split, token=self.token), temperature)


class HarnessRunFactory:
    """Makes one `HarnessRun` per rollout (OpenEnv's `ResourceSessionFactory.create`)."""

    def __init__(self, sessions: HarnessSessions, bundle: Bundle, temperature: float) -> None:
        self.sessions = sessions
        self.bundle = bundle
        self.temperature = temperature
        rows = bundle.dataset
        self._task_by_prompt = {_last_user_text(row["prompt"]): row["task_id"] for row in rows}
        self._task_ids = [row["task_id"] for row in rows]
        self._unscored = _UnscoredStreak(sessions.max_unscored_in_a_row)

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> HarnessRun:
        """Start the rollout of `task` (TRL's dataset row prompt); `seed`, the group's id, picks
        the task when the prompt names none of the split's."""
        task_id = self._task_by_prompt.get(_last_user_text(task))
        if task_id is None:
            if seed is None:
                raise KeyError(f"no task of split {self.bundle.split!r} has this prompt, and no seed was given")
            task_id = self._task_ids[seed % len(self._task_ids)]
        engine = {"llm_url": self.sessions.llm_url, "model": self.sessions.model, "temperature": self.temperature}
        data = ResetData(
            task_id=task_id, episode_id=episode_id, **{key: v for key, v in engine.items() if v is not None}
        )
        return HarnessRun(self, data)


class HarnessRun:
    """One harness episode, played in a thread of its own from its creation (TRL's
    `TrainableSession`); every method may be called from another thread."""

    def __init__(self, factory: HarnessRunFactory, data: ResetData) -> None:
        self._factory = factory
        bundle = factory.bundle
        self._session = Session(bundle.url, token=factory.sessions.token)
        self.episode = Episode(self._session, bundle.limits)
        self._data = data
        self._ended = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._play, name=f"corral-harness-{data.task_id}", daemon=True)
        self._thread.start()

    def _play(self) -> None:
        try:
            self.episode.start(self._data)
            if self.episode.open:
                self.episode.call(RUN_AGENT, {})
        except Exception as error:  # noqa: BLE001 - handed to whoever waits: a thread's own is lost
            self._failure = error
        finally:
            self._ended.set()

    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Block until the episode has ended: 0 when it was scored, 1 otherwise; TimeoutError
        past `timeout_s`."""
        if not self._ended.wait(timeout_s):
            raise TimeoutError(f"the harness episode of task {self._data.task_id} is still running after {timeout_s}s")
        if self._failure is not None:
            raise self._failure
        return 0 if self.episode.status == "scored" else 1

    def fetch_training_trace(self) -> Any:
        """The episode's captured calls as OpenEnv's `TrainingTrace` (the server built it from
        the engine's own token ids). Raises PlatformFailing after too many unscored episodes in
        a row, and ValueError (TRL drops the rollout) for one without a trace."""
        from openenv.core.harness.training import TrainingTrace

        self.wait_for_completion()
        self._factory._unscored.count(self.episode)
        capture = (self.episode.final.metadata if self.episode.final is not None else {}).get("capture") or {}
        if not capture.get("training_trace"):
            raise ValueError(f"episode of task {self._data.task_id} has no captured trace: {self.episode.reason}")
        return TrainingTrace.model_validate(capture["training_trace"])

    def verify(self, transcript: Sequence[Any], final_state: Any = None) -> Any:
        """The verifiers' reward, scored on the env host when the agent ended (None: unscored)."""
        from openenv.core.harness.rollout import VerifyResult

        self.wait_for_completion()
        return VerifyResult(env_reward=self.episode.reward, done=True, metrics={"status": self.episode.status})

    def close(self) -> None:
        """End the episode and its session; a `wait_for_completion` still blocked returns."""
        self._session.close()
        self._thread.join(CLOSE_WAIT_S)


class _UnscoredStreak:
    """Counts unscored episodes in a row, across a factory's runs (threads)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._streak: list[str] = []
        self._lock = threading.Lock()

    def count(self, episode: Episode) -> None:
        with self._lock:
            if episode.status != "unscored":
                self._streak.clear()
                return
            self._streak.append(episode.reason or "no reason given")
            if len(self._streak) >= self.limit:
                causes = "; ".join(dict.fromkeys(self._streak))
                raise PlatformFailing(
                    f"{len(self._streak)} harness episodes in a row ended unscored by the platform's fault "
                    f"(last causes: {causes}); fix the env host or the engine before training on"
                )


def _last_user_text(prompt: Any) -> str:
    """The last user message's text of a chat prompt (a string prompt is its own text)."""
    if isinstance(prompt, str):
        return prompt
    users = [
        message.get("content") for message in prompt if isinstance(message, Mapping) and message.get("role") == "user"
    ]
    return str(users[-1]) if users else ""
