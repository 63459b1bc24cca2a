"""Session ids on a host of several workers: each names the worker that minted it, so any
worker knows where to pass a request for it; an id no worker minted is the answering worker's
to refuse as unknown."""

from __future__ import annotations

from corral.server.workers.seat import WorkerSeat


def seat(index: int, count: int = 3) -> WorkerSeat:
    return WorkerSeat(index, [0] * count, [0] * count, "/nonexistent")


def test_an_id_names_its_worker_to_the_others_and_to_itself_is_its_own():
    minted = seat(2).mint()
    assert len(minted.split("-w")[0]) == 32 and minted.endswith("-w2")
    assert minted != seat(2).mint()
    assert [seat(index).holder(minted) for index in range(3)] == [2, 2, None]


def test_an_id_no_worker_of_the_host_minted_is_answered_where_it_arrives():
    unmarked = "0123456789abcdef0123456789abcdef"
    for session_id in (
        unmarked,
        f"{unmarked}-w3",
        f"{unmarked}-w",
        f"{unmarked}-w1/../x",
        f"x{unmarked}-w1",
        f"{unmarked}-w00001",
        "nope",
        None,
        7,
        ["-w1"],
    ):
        assert seat(0).holder(session_id) is None, session_id
