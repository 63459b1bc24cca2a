"""How a tool's MCP result becomes the observation's answer: its text, cut in the middle with a
note when longer than the server keeps."""

from __future__ import annotations

from corral.server.episodes.env_answers import cut, tool_answer


def test_a_long_answer_keeps_equal_head_and_tail_around_the_note():
    answer = cut("a" * 500 + "b" * 500, 300)
    head, note, tail = answer.partition("\n[... 700 characters cut: the answer was 1,000, the server keeps 300 ...]\n")
    assert note and head == "a" * len(head) and tail == "b" * len(tail) and len(head) == len(tail)
    assert len(answer) in (299, 300)  # all the limit allows (an odd remainder is one character short)


def test_an_answer_within_the_limit_is_whole_and_a_limit_below_the_note_keeps_the_note_alone():
    assert cut("abc", 3) == "abc"
    assert cut("x" * 1000, 10) == "\n[... 990 characters cut: the answer was 1,000, the server keeps 10 ...]\n"


def test_a_result_without_text_answers_with_its_structured_content_as_json():
    assert tool_answer("t", {"content": [], "structuredContent": {"a": 1}}, 100).result == '{"a":1}'
    assert (
        tool_answer("t", {"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}}, 100).result
        == "hi"
    )
    assert tool_answer("t", {"content": []}, 100).result == ""


MALFORMED = [
    [],
    "text",
    7,
    None,
    {"content": 7},
    {"content": "abc"},
    {"content": [7, None, "x", {"type": "text"}]},
    {"content": [{"type": "text", "text": ["a"]}]},
    {"content": [], "isError": True, "_meta": "not an object"},
    {"content": [{"type": 1, "text": "a"}], "isError": True, "_meta": {"corral/error_type": ["a"]}},
]


def test_a_malformed_result_is_read_as_far_as_it_makes_sense_and_never_raises():
    """The env answers as whoever holds its sandbox made it: no shape of answer may raise."""
    for result in MALFORMED:
        answer = tool_answer("t", result, 100)
        assert answer.result == "" or answer.error is not None, result
    assert tool_answer("t", {"content": [7, {"type": "text", "text": "kept"}]}, 100).result == "kept"
    failed = tool_answer("t", {"content": [{"type": "text", "text": "no"}], "isError": True, "_meta": 3}, 100)
    assert (failed.error.error_type, failed.error.message) == ("execution_error", "no")


def test_a_single_text_answer_is_read_as_any_other():
    """Most answers are one text part, read at once: as the general reading reads them."""
    said = {"content": [{"type": "text", "text": "hi"}], "isError": False}
    assert (tool_answer("t", said, 100).result, tool_answer("t", said, 100).error) == ("hi", None)
    assert tool_answer("t", said, 1).result == cut("hi", 1)  # still cut to the limit
    failed = tool_answer("t", {**said, "isError": True}, 100)
    assert (failed.result, failed.error.error_type, failed.error.message) == (None, "execution_error", "hi")
    assert tool_answer("t", {"content": [{"type": "text", "text": ""}], "structuredContent": [1]}, 100).result == "[1]"
    assert tool_answer("t", {"content": [{"type": "image", "text": "hi"}]}, 100).result == ""
