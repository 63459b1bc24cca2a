"""The wire frames carry no presentation, yet a kernel shows them as HTML and Markdown:
corral.client.display registers their Docs with IPython's formatters when corral.client is
imported in a running shell (a kernel always runs before a notebook's first import)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SHOWN = """
import json
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
import corral.client  # what a notebook imports, after its kernel started
from corral.protocol.frames import CallToolObservation, ResetObservation

ended = CallToolObservation(tool_name="end_turn", result="", done=True, reward=0.5, status="scored",
                            scores={"tests": 0.5}, metadata={"verifier_output": {"tests": "1 failed"}})
opened = ResetObservation(task_id="t-1", episode_id="e-1", prompt="Place your X.")
print(json.dumps([shell.display_formatter.format(frame)[0] for frame in (ended, opened)]))
"""


@pytest.mark.slow  # IPython in a fresh interpreter
def test_a_kernel_shows_the_frames_as_their_docs():
    out = subprocess.run([sys.executable, "-c", SHOWN], capture_output=True, text=True, check=True).stdout
    ended, opened = json.loads(out)
    assert "<summary><b>verifier output (tests)</b></summary>" in ended["text/html"]
    assert "**reward:** 0.5" in ended["text/markdown"]
    assert "task t-1 · episode e-1" in opened["text/html"]
    assert "Place your X." in opened["text/markdown"]


def test_the_frames_themselves_carry_no_presentation():
    from corral.protocol.frames import CallToolObservation, ResetObservation

    for frame in (CallToolObservation, ResetObservation):
        assert not hasattr(frame, "_repr_html_") and not hasattr(frame, "_repr_markdown_")
