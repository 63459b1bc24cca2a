"""The text of an observation frame, as `ObservationReply.of(observation).model_dump_json()`
writes it, made the cheap way: it is the server's most frequent frame (every step's reply).

One pass of pydantic's serialiser rather than a dump, a validation and a dump again; a tool's
plain answer (most replies) spliced into its text made once (`_PlainAnswer`). A lone
surrogate in any of its texts (a file name that is not UTF-8, decoded with surrogateescape
into a verifier's output or a reason) is written as U+FFFD: UTF-8 cannot carry it, and the
reply would fail, the episode's score unsent.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

from corral.protocol.frames import ENVELOPE, STEP_REWARD, CallToolObservation, Observation, ObservationReply
from corral.protocol.surrogates import replace_lone_surrogates


def observation_reply_text(observation: Observation) -> str:
    """`ObservationReply.of(observation).model_dump_json()`, the same text (U+FFFD for a lone surrogate)."""
    try:
        if _PlainAnswer.fits(observation):
            return _PLAIN_ANSWER.text(observation.tool_name, observation.result)  # type: ignore[attr-defined]
        return _observation_json(observation)
    except (PydanticSerializationError, UnicodeEncodeError):
        readable = replace_lone_surrogates(observation.model_dump())
        return _observation_json(type(observation).model_validate(readable))


def _json(value: Any) -> str:
    """`value` as a model's field of type Any serialises it (a non-finite float is null)."""
    return to_json(value, inf_nan_mode="null").decode()


def _observation_json(observation: Observation) -> str:
    fields = observation.model_dump_json(exclude=ENVELOPE)
    reward = "null" if observation.reward is None else _json(float(observation.reward))
    metadata = f',"metadata":{_json(observation.metadata)}' if observation.metadata else ""
    done = "true" if observation.done else "false"
    return f'{{"type":"observation","data":{{"observation":{fields},"reward":{reward},"done":{done}{metadata}}}}}'


class _PlainAnswer:
    """The reply frame of a tool's plain answer (a text, no error, the episode going on): the
    text `observation_reply_text` gives it, made once from the models with markers where the tool's name and
    its text go, so that a reply is three strings and two JSON strings joined (a quarter of
    the model's dump: a tool call's reply is the server's most frequent frame)."""

    _NAME, _RESULT = "\x00tool_name\x00", "\x00result\x00"

    def __init__(self) -> None:
        sample = CallToolObservation(tool_name=self._NAME, result=self._RESULT, reward=STEP_REWARD)
        head, rest = ObservationReply.of(sample).model_dump_json().split(_json(self._NAME))
        self._head, (self._middle, self._tail) = head, rest.split(_json(self._RESULT))

    @staticmethod
    def fits(observation: Observation) -> bool:
        """Whether `observation` is one: every field but the name and the text at the value
        `_PlainAnswer` was made with (the reward STEP_REWARD's 0.0 itself, not -0.0)."""
        return (
            type(observation) is CallToolObservation
            and type(observation.result) is str
            and observation.reward == STEP_REWARD
            and math.copysign(1.0, observation.reward) == 1.0
            and observation.done is False
            and observation.error is None
            and observation.prompt is None
            and observation.turn is None
            and observation.status is None
            and observation.scores is None
            and observation.reason is None
            and not observation.metadata
        )

    def text(self, tool_name: str, result: str) -> str:
        return f"{self._head}{_json(tool_name)}{self._middle}{_json(result)}{self._tail}"


_PLAIN_ANSWER = _PlainAnswer()
