"""corral's frame models read OpenEnv 0.10's own frames, and OpenEnv's models read corral's."""

from __future__ import annotations

import json

import pytest
from openenv.core.env_server import mcp_types as oe_mcp
from openenv.core.env_server import types as oe
from openenv.core.env_server.serialization import serialize_observation

from corral.protocol.catalog import END_TURN_TOOL, ToolSpec
from corral.protocol.frames import (
    CLIENT_FRAMES,
    SERVER_FRAMES,
    CallTool,
    CallToolObservation,
    CloseRequest,
    EpisodeState,
    ErrorCode,
    ErrorReply,
    JsonRpcError,
    JsonRpcResponse,
    Limits,
    ListToolsObservation,
    McpReply,
    McpRequest,
    ObservationData,
    ObservationReply,
    ResetData,
    ResetObservation,
    ResetRequest,
    StateReply,
    StateRequest,
    StepRequest,
    ToolError,
    schemas,
)
from corral.protocol.reply_text import observation_reply_text

TOOL = ToolSpec(
    name="submit", description="Submit.", input_schema={"type": "object", "properties": {"x": {"type": "integer"}}}
)


def openenv_frames() -> list[dict]:
    """Every client frame OpenEnv's own models make, as its clients send them."""
    return [
        oe.WSResetMessage(data={"seed": 3, "episode_id": "e-1", "split": "train", "index": 0}).model_dump(),
        oe.WSStepMessage(data=oe_mcp.ListToolsAction().model_dump()).model_dump(),
        oe.WSStepMessage(data=oe_mcp.CallToolAction(tool_name="submit", arguments={"x": 3}).model_dump()).model_dump(),
        oe.WSStateMessage().model_dump(),
        oe.WSCloseMessage().model_dump(),
        oe_mcp.WSMCPMessage(data={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).model_dump(),
    ]


@pytest.mark.parametrize(
    "frame", openenv_frames(), ids=lambda frame: frame["type"] + "/" + str(frame.get("data", {}).get("type", ""))
)
def test_every_openenv_client_frame_parses_and_round_trips(frame):
    parsed = CLIENT_FRAMES.validate_python(frame)
    assert parsed.type == frame["type"]
    again = CLIENT_FRAMES.validate_json(parsed.model_dump_json())
    assert again == parsed
    if isinstance(parsed, StepRequest):  # what corral sends, OpenEnv's step models take
        action = oe_mcp.CallToolAction if isinstance(parsed.data, CallTool) else oe_mcp.ListToolsAction
        assert action.model_validate(parsed.data.model_dump()).model_dump() == frame["data"]


def test_corral_frames_are_the_ones_openenv_sends():
    assert json.loads(ResetRequest(data=ResetData(seed=3)).model_dump_json(exclude_none=True)) == {
        "type": "reset",
        "data": {"seed": 3},
    }
    assert StateRequest().model_dump() == oe.WSStateMessage().model_dump()
    assert CloseRequest().model_dump() == oe.WSCloseMessage().model_dump()
    call = StepRequest(data=CallTool(tool_name="submit", arguments={"x": 1}))
    assert oe.WSStepMessage.model_validate(call.model_dump()).data == call.data.model_dump()


def test_reset_data_takes_a_dataset_row_and_refuses_unusable_limits():
    row = {"prompt": [{"role": "user", "content": "hi"}], "split": "train", "index": 2, "task_id": "t"}
    assert ResetData.model_validate(row) == ResetData(split="train", index=2, task_id="t")
    for bad in ({"tool_timeout_s": -1}, {"tool_timeout_s": 0}, {"reset_timeout_s": float("inf")}, {"index": -1}):
        with pytest.raises(ValueError):
            ResetData.model_validate(bad)
    with pytest.raises(ValueError):
        ResetData.model_validate_json('{"tool_timeout_s": Infinity}')


@pytest.mark.parametrize(
    "observation",
    [
        ResetObservation(
            task_id="t",
            episode_id="e",
            prompt="Go.",
            offered_tools=[TOOL, END_TURN_TOOL],
            limits=Limits(tool_timeout_s=3, reset_timeout_s=600),
        ),
        ListToolsObservation(tools=[TOOL], reward=0.0),
        CallToolObservation(tool_name="submit", result="ok", reward=0.0),
        CallToolObservation(
            tool_name="submit", error=ToolError(error_type="invalid_args", message="x: not an integer"), reward=0.0
        ),
        CallToolObservation(
            tool_name="end_turn",
            result="The episode has ended.",
            done=True,
            reward=0.2,
            status="scored",
            scores={"grade": 0.2},
            metadata={"verifier_output": {"grade": "ok"}},
        ),
        CallToolObservation(
            tool_name="wait",
            error=ToolError(error_type="timeout", message="late"),
            done=True,
            status="unscored",
            reason="late",
        ),
    ],
    ids=["reset", "list_tools", "call_tool", "refused", "scored", "unscored"],
)
def test_an_observation_travels_as_openenv_serialises_it_and_parses_back(observation):
    sent = json.loads(ObservationReply.of(observation).model_dump_json())
    assert sent["type"] == "observation"
    # OpenEnv's own serialisation of an observation with the same fields gives the same data.
    fields = sent["data"]["observation"]
    assert sent["data"] == {
        "observation": fields,
        "reward": observation.reward,
        "done": observation.done,
        **({"metadata": observation.metadata} if observation.metadata else {}),
    }
    assert "tools" not in fields if not isinstance(observation, ListToolsObservation) else "tools" in fields
    reply = SERVER_FRAMES.validate_python(sent)
    assert reply.data.parse(type(observation)) == observation


@pytest.mark.parametrize(
    "observation",
    [
        CallToolObservation(tool_name="say", result="plain", reward=0.0),
        CallToolObservation(tool_name="say", result={"nested": [1, 2.5, None, "\u00e9\u2028\U0001f600"]}, reward=0.0),
        CallToolObservation(
            tool_name="end_turn",
            result="x",
            done=True,
            reward=1e-7,
            status="scored",
            scores={"a": 1e16},
            metadata={"verifier_output": {"a": "ok"}, "odd": [float("inf"), float("nan")]},
        ),
        # Set without validation, as the episode ends one: an int reward, a NaN score.
        CallToolObservation(tool_name="end_turn").model_copy(
            update={"done": True, "reward": 1, "scores": {"a": float("nan")}}
        ),
        CallToolObservation(
            tool_name="wait", error=ToolError(error_type="timeout", message="late"), done=True, reward=None
        ),
        ResetObservation(
            task_id="t",
            episode_id="e",
            prompt="Go.",
            offered_tools=[TOOL, END_TURN_TOOL],
            limits=Limits(tool_timeout_s=3, reset_timeout_s=600),
            metadata={"limits": "lowered"},
        ),
        ListToolsObservation(tools=[TOOL], reward=0.0),
    ],
    ids=["call_tool", "structured", "scored", "unvalidated", "unscored", "reset", "list_tools"],
)
def test_the_servers_one_pass_observation_frame_is_the_models_own_text(observation):
    assert observation_reply_text(observation) == ObservationReply.of(observation).model_dump_json()


PLAIN = CallToolObservation(tool_name="say", result="plain", reward=0.0)


@pytest.mark.parametrize(
    "observation",
    [
        PLAIN,
        # Text JSON escapes, or does not: quotes, controls, U+2028, non-ASCII, an emoji, a marker's NUL.
        PLAIN.model_copy(update={"tool_name": 'say "it"', "result": 'a"b\\c\n\t\x00\x1f\x7f\u2028\u00e9\U0001f600'}),
        PLAIN.model_copy(update={"result": ""}),
        PLAIN.model_copy(update={"result": "x" * 100_000}),
        # Close to a plain answer, but not one: each must be dumped by the model, field by field.
        PLAIN.model_copy(update={"reward": -0.0}),
        PLAIN.model_copy(update={"reward": 0}),
        PLAIN.model_copy(update={"reward": None}),
        PLAIN.model_copy(update={"metadata": {"a": 1}}),
        PLAIN.model_copy(update={"turn": 2}),
        PLAIN.model_copy(update={"prompt": "next"}),
        PLAIN.model_copy(update={"done": True}),
        PLAIN.model_copy(update={"result": 7}),
        PLAIN.model_copy(update={"status": "scored"}),
        PLAIN.model_copy(update={"scores": {}}),
        PLAIN.model_copy(update={"reason": ""}),
        PLAIN.model_copy(update={"error": ToolError(error_type="timeout", message="late")}),
    ],
    ids=[
        "plain",
        "escapes",
        "empty",
        "long",
        "negative_zero",
        "int_reward",
        "no_reward",
        "metadata",
        "turn",
        "prompt",
        "done",
        "int_result",
        "status",
        "scores",
        "reason",
        "error",
    ],
)
def test_a_tools_plain_answer_frame_is_the_models_own_text(observation):
    assert observation_reply_text(observation) == ObservationReply.of(observation).model_dump_json()


@pytest.mark.parametrize("done", [False, True])  # a tool's plain answer (spliced), and an ending
def test_a_text_that_utf8_cannot_carry_is_sent_with_a_replacement_character(done):
    # A file name that is not UTF-8, decoded with surrogateescape, in a tool's answer or a verifier's output.
    observation = CallToolObservation(tool_name="bash", result="ls: caf\udce9", reward=0.0, done=done)
    readable = CallToolObservation(tool_name="bash", result="ls: caf\ufffd", reward=0.0, done=done)

    assert observation_reply_text(observation) == ObservationReply.of(readable).model_dump_json()


def test_openenv_parses_corral_observations_with_its_own_models():
    listed = ObservationData.of(ListToolsObservation(tools=[TOOL], reward=0.0))
    assert oe_mcp.ListToolsObservation.model_validate({**listed.observation, "reward": 0.0}).tools[0].name == "submit"
    called = ObservationData.of(
        CallToolObservation(tool_name="submit", error=ToolError(error_type="invalid_args", message="no"))
    )
    ours = {key: value for key, value in called.observation.items() if key in oe_mcp.CallToolObservation.model_fields}
    theirs = oe_mcp.CallToolObservation.model_validate(ours)
    assert theirs.error.error_type == oe_mcp.ToolErrorType.INVALID_ARGS and theirs.error.message == "no"
    assert serialize_observation(theirs)["observation"]["error"] == called.observation["error"]


def test_server_frames_round_trip():
    frames = [
        StateReply(data=EpisodeState(episode_id="e", step_count=2, task_id="t")),
        ErrorReply.of(ErrorCode.CAPACITY_REACHED, "full", active_sessions=8, max_sessions=8),
        McpReply(data=JsonRpcResponse(id=1, result={"tools": []})),
        McpReply(data=JsonRpcResponse(id=2, error=JsonRpcError(code=-32601, message="no such method"))),
    ]
    for frame in frames:
        assert SERVER_FRAMES.validate_json(frame.model_dump_json()) == frame
    error = json.loads(frames[1].model_dump_json())
    assert oe.WSErrorResponse.model_validate(error).data == {
        "message": "full",
        "code": "CAPACITY_REACHED",
        "active_sessions": 8,
        "max_sessions": 8,
    }
    assert "result" not in json.loads(frames[3].model_dump_json())["data"]
    assert "error" not in json.loads(frames[2].model_dump_json())["data"]


def test_an_mcp_frame_is_openenvs_and_its_reply_is_json_rpc():
    request = McpRequest(data={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert oe_mcp.WSMCPMessage.model_validate(request.model_dump()).data["method"] == "tools/list"
    reply = json.loads(McpReply(data=JsonRpcResponse(id=1, result={"tools": []})).model_dump_json())
    assert oe_mcp.JsonRpcResponse.model_validate(reply["data"]).result == {"tools": []}


def test_the_schema_describes_every_observation_with_reward_and_done():
    published = schemas()
    assert set(published) == {"action", "observation", "reset_observation", "state"}
    step_kinds = {ref["$ref"].rsplit("/", 1)[1] for ref in published["observation"]["anyOf"]}
    assert step_kinds == {"ListToolsObservation", "CallToolObservation"}
    for kind in step_kinds:
        assert {"reward", "done", "metadata"} <= set(published["observation"]["$defs"][kind]["properties"])
    assert "input_schema" in json.dumps(published["reset_observation"])  # named as the observation sends it
