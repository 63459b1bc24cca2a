"""How a tool's MCP result becomes the observation's answer: its text, cut in the middle with a
note when longer than the server keeps."""

from __future__ import annotations

from corral.server.episode import _cut, _tool_answer


def test_a_long_answer_keeps_equal_head_and_tail_around_the_note():
    cut = _cut("a" * 500 + "b" * 500, 300)
    head, note, tail = cut.partition("\n[... 700 characters cut: the answer was 1,000, the server keeps 300 ...]\n")
    assert note and head == "a" * len(head) and tail == "b" * len(tail) and len(head) == len(tail)
    assert len(cut) in (299, 300)  # all the limit allows (an odd remainder is one character short)


def test_an_answer_within_the_limit_is_whole_and_a_limit_below_the_note_keeps_the_note_alone():
    assert _cut("abc", 3) == "abc"
    assert _cut("x" * 1000, 10) == "\n[... 990 characters cut: the answer was 1,000, the server keeps 10 ...]\n"


def test_a_result_without_text_answers_with_its_structured_content_as_json():
    assert _tool_answer("t", {"content": [], "structuredContent": {"a": 1}}, 100).result == '{"a":1}'
    assert _tool_answer("t", {"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}}, 100).result == "hi"
    assert _tool_answer("t", {"content": []}, 100).result == ""
