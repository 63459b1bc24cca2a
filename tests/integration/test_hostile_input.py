"""Hostile input costs the sender only: malformed, oversized, wrongly typed and out-of-order
frames and JSON-RPC requests each get an error, while another session plays on; floods do not
grow the server's memory; odd headers get 401/403, never a 500 or a traceback."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

from corral.client import Bundle
from corral.protocol.frames import ErrorReply, McpReply, ObservationReply, StateReply
from tests.conftest import FIXTURES, serving
from tests.wire import call, opened, send, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
TOKEN = "s3cret"


# Named functions, not lambdas: hypothesis reads a lambda's source, racing other threads' imports.
def containers_of(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)


def deeply_nested(depth: int) -> str:
    return "[" * depth * 50 + "]" * depth * 50  # past json's recursion limit, for most depths


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    containers_of,
    max_leaves=20,
)
frame_types = st.sampled_from(["step", "state", "close", "mcp", "dance", "", None, 3])
# Resets whose data is wrong: a valid reset starts an env, which the good session does often enough.
bad_resets = st.fixed_dictionaries(
    {
        "type": st.just("reset"),
        "data": st.fixed_dictionaries(
            {},
            optional={
                "split": st.sampled_from(["nope", ""]) | st.integers(),
                "index": st.integers(max_value=-1) | st.text(max_size=5),
                "seed": st.integers(max_value=-1) | st.floats(),
                "tool_timeout_s": st.sampled_from([-1, 0, 1e309, "fast"]),
            },
        ).filter(bool),
    }
)
step_data = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["call_tool", "list_tools", "nope"]) | json_values,
        "tool_name": st.sampled_from(["say", "end_turn", "crash", "nope"]) | json_values,  # not wait: it sleeps
        "arguments": st.dictionaries(st.sampled_from(["text", "seconds", "response"]), json_values) | json_values,
    },
)
jsonrpc_data = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0"]) | json_values,
        "id": st.integers() | st.text(max_size=5) | json_values,
        "method": st.sampled_from(["tools/list", "tools/call", "initialize", "openenv/session/close", "x"])
        | json_values,
        "params": st.fixed_dictionaries(
            {}, optional={"name": json_values, "arguments": json_values, "session_id": json_values}
        )
        | json_values,
    },
)
frames = st.one_of(
    st.text(max_size=200),  # not JSON, mostly
    json_values.map(json.dumps),
    st.fixed_dictionaries({"type": frame_types}, optional={"data": step_data | jsonrpc_data | json_values}).map(
        json.dumps
    ),
    bad_resets.map(json.dumps),
    st.integers(1, 60).map(deeply_nested),
)


@pytest.fixture(scope="module")
def toybox():
    yield from serving(FIXTURES / "toybox", max_concurrent_envs=8, tool_timeout_s=5)


class GoodPlayer(threading.Thread):
    """Plays correct episodes on a session of its own until stopped; each must score 1."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.rewards, self.failures = url, [], []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with Bundle(self.url, split="toy") as env:
                environment = env.factory()
                while not self.stop.is_set():
                    environment.reset(**env.dataset[0])
                    environment.say(text="apple")
                    self.rewards.append(environment.get_reward())
        except Exception as error:  # noqa: BLE001 - reported by the test
            self.failures.append(repr(error))


@pytest.fixture
def good_player(toybox):
    player = GoodPlayer(toybox.url)
    player.start()
    yield player
    player.stop.set()
    player.join(60)
    assert player.failures == [] and player.rewards and set(player.rewards) == {1.0}


@pytest.mark.timing
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    batch=st.lists(frames, min_size=200, max_size=200)
)  # a thousand in all: two cores loaded 8 deep play them in minutes
def test_a_thousand_malformed_frames_each_get_an_error_and_a_good_session_plays_on(toybox, good_player, caplog, batch):
    with caplog.at_level(logging.WARNING), contextlib.ExitStack() as sockets:
        socket_ = sockets.enter_context(ws(toybox))
        for frame in batch:
            try:
                reply = send(socket_, frame, timeout_s=30)
            except ConnectionClosed:  # a close frame (valid or not) may end the socket: open another
                socket_ = sockets.enter_context(ws(toybox))  # closed too at the end, with its episode
                continue
            assert isinstance(reply, ErrorReply | McpReply | ObservationReply | StateReply)
            if isinstance(reply, ErrorReply):
                assert "Traceback" not in reply.data.message
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


@pytest.mark.timing
def test_a_flood_of_large_frames_during_a_call_does_not_grow_the_server(toybox):
    # What Python holds at its peak (the server runs in this process), not the RSS: the
    # allocator keeps freed memory as it likes, most of all on a busy machine, which once
    # read as 191 MB of growth though every frame had been let go.
    tracemalloc.start()
    try:
        with ws(toybox) as socket_:
            opened(socket_, split="toy", index=0)
            socket_.send(call("wait", seconds=3).model_dump_json())
            megabyte = json.dumps({"type": "state", "pad": "x" * (1024 * 1024)})
            sent = 0
            try:
                for _ in range(300):  # the server stops reading: sending blocks, within the socket's buffers
                    socket_.send(megabyte)
                    sent += 1
            except (TimeoutError, ConnectionClosed):
                pass
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert peak_mb < 64, f"the server held {peak_mb:.0f} MB at once during a flood of {sent} one-megabyte frames"


def test_a_frame_over_the_size_limit_closes_only_its_socket(toybox, good_player):
    with ws(toybox) as socket_, pytest.raises(ConnectionClosed) as closed:
        socket_.send("x" * (5 * 1024 * 1024))
        socket_.recv(timeout=30)
    # The server closes with 1009 (message too big) as soon as it reads the frame's length; the
    # close can be lost when the kernel resets the connection first (the frame's rest unread).
    assert closed.value.rcvd is None or closed.value.rcvd.code == 1009
    time.sleep(0.5)
    assert good_player.failures == []


def test_deep_nesting_and_bad_utf8_are_errors_not_crashes(toybox):
    with ws(toybox) as socket_:
        assert send(socket_, "[" * 100_000 + "]" * 100_000).data.code == "INVALID_JSON"
        nested = {"type": "step", "data": {"type": "call_tool", "tool_name": "say", "arguments": {}}}
        inner = nested["data"]["arguments"]
        for _ in range(400):
            inner["text"] = {}
            inner = inner["text"]
        assert send(socket_, json.dumps(nested)).data.code in ("EXECUTION_ERROR", "VALIDATION_ERROR")
        socket_.send(b"\xff\xfe{not utf-8")
        assert isinstance(send(socket_, '{"type": "state"}'), ErrorReply | StateReply)


def raw_status(url: str, authorization: bytes | None) -> int:
    """The status a GET /health gets with exactly this Authorization header, sent byte for byte."""
    host, port = url.removeprefix("http://").split(":")
    request = b"GET /health HTTP/1.1\r\nHost: " + host.encode() + b"\r\nConnection: close\r\n"
    if authorization is not None:
        request += b"Authorization: " + authorization + b"\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(request + b"\r\n")
        return int(raw.makefile("rb").readline().split()[1])


@pytest.fixture(scope="module")
def guarded():
    yield from serving(FIXTURES / "toybox", token=TOKEN)


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        (b"", 403),
        (b"Bearer", 403),
        (b"bearer " + TOKEN.encode(), 403),
        (b"Basic " + TOKEN.encode(), 403),
        (b"Bearer  " + TOKEN.encode(), 403),  # a second space is inside the value
        (b"Bearer " + TOKEN.encode() + b" \t", 200),  # around it, whitespace is HTTP's, not the value's
        (b"Bearer \xc3\xa9t\xc3\xa9", 403),  # UTF-8
        (b"Bearer \xff\xfe", 403),  # not UTF-8 at all
        (b"Bearer " + b"x" * 8000, 403),
        (b"Bearer " + TOKEN.encode(), 200),
    ],
)
def test_odd_authorization_headers_get_401_or_403(guarded, authorization, status, caplog):
    with caplog.at_level(logging.WARNING):
        assert raw_status(guarded.url, authorization) == status
    assert "Traceback" not in caplog.text
