"""The output buffers every remote sandbox reads its env through: whole stdout lines, a
bounded stdout that makes a flooding env wait, an end the reader hears, a bounded stderr tail."""

from __future__ import annotations

import asyncio

import pytest

from corral.sandboxes.shared import stream_buffers
from corral.sandboxes.shared.stream_buffers import OutputBuffers


def test_lines_come_whole_however_the_chunks_split_them():
    async def check() -> list[bytes]:
        output = OutputBuffers()
        reading = asyncio.create_task(output.read_line("ended"))
        await output.add_stdout(b'{"id": ')
        await asyncio.sleep(0)
        assert not reading.done()  # half a line is not a line
        await output.add_stdout(b"1}\nsecond\nthi")
        return [await reading, await output.read_line("ended")]

    assert asyncio.run(check()) == [b'{"id": 1}', b"second"]


def test_a_line_past_the_limit_is_refused_and_its_writer_waits(monkeypatch):
    monkeypatch.setattr(stream_buffers, "LINE_LIMIT", 1024)

    async def check() -> None:
        output = OutputBuffers()
        feeding = asyncio.create_task(output.add_stdout(b"x" * 1024))
        await asyncio.sleep(0.01)
        assert not feeding.done()  # a full buffer holds its feeder back: the stream is read no further
        with pytest.raises(EOFError, match=r"more than 0 MB on stdout without a newline"):
            await output.read_line("ended")
        feeding.cancel()

    asyncio.run(check())


def test_a_feeder_held_back_goes_on_once_a_line_is_read(monkeypatch):
    monkeypatch.setattr(stream_buffers, "LINE_LIMIT", 1024)

    async def check() -> None:
        output = OutputBuffers()
        feeding = asyncio.create_task(output.add_stdout(b"a" * 600 + b"\n" + b"b" * 600))
        await asyncio.sleep(0.01)
        assert not feeding.done()
        assert await output.read_line("ended") == b"a" * 600
        await asyncio.wait_for(feeding, 1.0)  # room again: the feeder returns

    asyncio.run(check())


def test_an_ended_stream_gives_its_last_lines_then_the_message():
    async def check() -> None:
        output = OutputBuffers()
        waiting = asyncio.create_task(output.read_line("the pod's attach stream ended"))
        await output.add_stdout(b"last\npartial")
        output.end()
        assert await waiting == b"last"
        with pytest.raises(EOFError, match="the pod's attach stream ended"):
            await asyncio.wait_for(output.read_line("the pod's attach stream ended"), 1.0)
        assert await output.read() == b"partial"
        assert await output.read() == b""

    asyncio.run(check())


def test_a_reader_waiting_on_an_empty_stream_hears_its_end():
    async def check() -> None:
        output = OutputBuffers()
        waiting = asyncio.create_task(output.read_line("gone"))
        await asyncio.sleep(0.01)
        output.end()
        with pytest.raises(EOFError, match="gone"):
            await asyncio.wait_for(waiting, 1.0)

    asyncio.run(check())


def test_stderr_keeps_its_tail_and_corrals_notes(monkeypatch):
    monkeypatch.setattr(stream_buffers, "STDERR_KEEP", 100)

    async def check() -> None:
        output = OutputBuffers()
        for n in range(50):
            output.add_stderr(f"line {n:02d}\n".encode())
        output.note("the attach stream ended: OOMKilled")
        tail = output.stderr_tail(10_000)
        assert "line 00" not in tail and "line 49\n" in tail  # the oldest went, the newest stayed
        assert len(tail) < 100 + 50
        assert tail.endswith("\n[corral] the attach stream ended: OOMKilled\n")
        assert output.stderr_tail(8) == "OOMKilled\n"[-8:]

    asyncio.run(check())


def test_a_chunk_longer_than_the_tail_keeps_its_end_when_a_short_one_follows(monkeypatch):
    """The trim drops a chunk only while the newer ones alone fill the tail: a traceback read in
    one long chunk, then corral's note, still shows the error it ends with."""
    monkeypatch.setattr(stream_buffers, "STDERR_KEEP", 100)

    async def check() -> str:
        output = OutputBuffers()
        output.add_stderr(b"Traceback (most recent call last):\n" + b"  ...\n" * 20 + b"MemoryError\n")
        output.note("the env exited with status 1")
        return output.stderr_tail(10_000)

    tail = asyncio.run(check())
    assert tail.endswith("MemoryError\n\n[corral] the env exited with status 1\n")


def test_a_character_split_between_stderr_chunks_reads_whole():
    async def check() -> str:
        output = OutputBuffers()
        encoded = "né".encode()
        output.add_stderr(encoded[:2])
        output.add_stderr(encoded[2:])
        return output.stderr_tail()

    assert asyncio.run(check()) == "né"
