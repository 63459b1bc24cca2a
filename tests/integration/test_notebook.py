"""examples/play.ipynb, executed cell by cell in a fresh Jupyter kernel (a running event loop in
the caller's thread): `Bundle.local` and `Bundle(url)` each play a GridSim day to 0.2, after an
idle cell that outlasts two keepalive intervals, and the transcripts display as HTML."""

from __future__ import annotations

import asyncio
import time

import nbformat
import pytest
from nbclient import NotebookClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from corral.client.urls import ws_url
from corral.protocol.frames import ResetRequest
from tests.conftest import BUNDLES, REPO, serving

NOTEBOOK = REPO / "examples" / "play.ipynb"
KEEPALIVE_S = 0.5  # the notebook idles 3 x this: a socket whose pings went unanswered is closed by then

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


@pytest.fixture(scope="module")
def gridsim_url():
    """The server the notebook's `Bundle(url)` plays, pinging every KEEPALIVE_S seconds."""
    for server in serving(BUNDLES / "gridsim", keepalive=KEEPALIVE_S):
        yield server.url


@pytest.fixture(scope="module")
def executed(gridsim_url):
    """The notebook after a run in a fresh kernel, its settings cell pointed at this test's
    server, the local sandbox and a short keepalive."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    settings = tagged(notebook, "parameters")
    settings.source = (
        f'BUNDLE = "../bundles/gridsim"\nSERVER_URL = "{gridsim_url}"\nSANDBOX = "local"\nKEEPALIVE = {KEEPALIVE_S}'
    )
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    return notebook


def tagged(notebook, tag: str):
    (cell,) = [cell for cell in notebook.cells if tag in cell.metadata.get("tags", [])]
    return cell


def shown(notebook, tag: str, mime: str = "text/plain") -> str:
    """What the tagged cell displayed as `mime` (its result, or what it printed)."""
    cell = tagged(notebook, tag)
    for output in cell.outputs:
        if mime in output.get("data", {}):
            return output["data"][mime]
    raise AssertionError(f"cell {tag} showed no {mime}: {cell.outputs}")


def test_the_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not cell.outputs and cell.execution_count is None for cell in code)


def test_bundle_local_plays_a_gridsim_day_to_0_2_in_a_kernel(executed):
    assert "expected exactly 24 integers, got 23" in shown(executed, "local-refused")  # answered after the idle cell
    assert shown(executed, "local-reward") == "0.2"


def test_bundle_url_plays_a_gridsim_day_to_0_2_in_a_kernel(executed):
    assert '"submitted":true' in shown(executed, "url-answer")  # answered after the idle cell
    assert shown(executed, "url-reward") == "0.2"


def test_the_transcripts_display_as_html_with_every_call_and_the_reward(executed):
    local = shown(executed, "local-transcript", "text/html")
    for call in (
        "submit_schedule(actions=[0, 0, 0",
        "expected exactly 24 integers, got 23",
        "end_turn",
        "<b>reward:</b> 0.2",
    ):
        assert call in local
    assert local.count("submit_schedule(actions=") == 2
    assert "<b>reward:</b> 0.2" in shown(executed, "url-transcript", "text/html")


def test_a_socket_that_stops_answering_pings_is_closed_within_the_notebooks_idle_time(gridsim_url):
    """The control for the idle cells: at these settings the server drops a client whose loop is
    blocked for as long as the notebook idles, so the notebook's episodes survived because their
    background loop answered the pings."""

    async def idle_with_the_loop_blocked() -> bool:
        async with connect(ws_url(gridsim_url), ping_interval=None, proxy=None) as socket:
            await socket.send(ResetRequest().model_dump_json())
            await socket.recv()
            time.sleep(3 * KEEPALIVE_S)  # noqa: ASYNC251 - on purpose: blocks this loop, so the server's pings go unanswered
            try:
                await asyncio.wait_for(socket.recv(), 5 * KEEPALIVE_S)
            except ConnectionClosed:
                return True
            except TimeoutError:  # still open: the idle cells would pass without keepalives
                return False
            return False

    assert asyncio.run(idle_with_the_loop_blocked())
