"""The JSON-RPC framing both ends of the server <-> env link use: one message per line."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "sandboxes"))

from corral.env import jsonrpc


@pytest.mark.parametrize(
    "message",
    [
        jsonrpc.request("corral-1", "tools/call", {"name": "add", "arguments": {"a": 2}}),
        jsonrpc.request(0, "ping"),
        jsonrpc.notification("notifications/initialized"),
        jsonrpc.result("corral-2", {"content": [{"type": "text", "text": "5"}]}),
        jsonrpc.result(3, None),
        jsonrpc.error(None, jsonrpc.PARSE_ERROR, "parse error"),
        jsonrpc.error(4, jsonrpc.SERVER_ERROR, "KeyError: 'day'", {"traceback": "..."}),
    ],
    ids=["request", "int-id", "notification", "result", "null-result", "error", "error-data"],
)
def test_a_message_survives_encode_and_decode(message):
    line = jsonrpc.encode(message)

    assert b"\n" not in line
    assert jsonrpc.decode(line) == message
    assert jsonrpc.decode(line.decode()) == message


def test_a_line_is_compact_json_with_text_left_as_utf_8():
    line = jsonrpc.encode(jsonrpc.result(1, {"text": "Zürich\nnext line"}))

    assert line == '{"jsonrpc":"2.0","id":1,"result":{"text":"Zürich\\nnext line"}}'.encode()


def test_a_lone_surrogate_is_written_as_a_json_escape_and_read_back():
    text = "half a pair: \ud83d"

    line = jsonrpc.encode(jsonrpc.result(1, text))

    assert b"\\ud83d" in line
    assert jsonrpc.decode(line)["result"] == text


def test_the_builders_give_json_rpc_2_shapes():
    assert jsonrpc.request("corral-1", "tools/list") == {
        "jsonrpc": "2.0",
        "id": "corral-1",
        "method": "tools/list",
        "params": {},
    }
    assert jsonrpc.notification("notifications/initialized", {"x": 1}) == {
        "jsonrpc": "2.0",
        "method": "notifications/initialized",
        "params": {"x": 1},
    }
    assert jsonrpc.error(7, jsonrpc.METHOD_NOT_FOUND, "no such method") == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32601, "message": "no such method"},
    }


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"stray print from a tool", -32700),
        (b'{"jsonrpc": "2.0", "id": 1', -32700),
        (b"\xff\xfe not utf-8", -32700),
        (b"[1, 2]", -32600),
        (b'"a string"', -32600),
        (b'{"id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", -32700),
    ],
    ids=["text", "cut-short", "not-utf-8", "array", "string", "nested-too-deep"],
)
def test_a_line_that_is_not_a_message_is_an_rpc_error_with_its_code(line, code):
    with pytest.raises(jsonrpc.RpcError) as caught:
        jsonrpc.decode(line)

    assert caught.value.code == code


def test_the_error_codes_are_json_rpc_s():
    codes = (
        jsonrpc.PARSE_ERROR,
        jsonrpc.INVALID_REQUEST,
        jsonrpc.METHOD_NOT_FOUND,
        jsonrpc.INVALID_PARAMS,
        jsonrpc.INTERNAL_ERROR,
        jsonrpc.SERVER_ERROR,
    )
    assert codes == (-32700, -32600, -32601, -32602, -32603, -32000)
    assert jsonrpc.PROTOCOL_VERSION in jsonrpc.SUPPORTED_VERSIONS
