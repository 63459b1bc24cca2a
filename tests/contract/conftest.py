"""The providers the contract suite runs on: local and docker always (CI starts an engine),
the modal provider against a stand-in for Modal's cloud (fake_modal) always, and against
Modal's cloud itself when this machine has Modal credentials.

The Modal run is the one test of the project allowed to need what a machine may lack. Where
it cannot run it is skipped with the reason, and the session's summary says so in a line of
its own, so a CI log never passes over it in silence.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import skip_or_fail_under_ci
from tests.contract import fake_modal
from tests.contract.fake_kubernetes_node import NEEDS_BWRAP
from tests.contract.providers import (
    DockerUnderTest,
    KubernetesUnderTest,
    LocalUnderTest,
    ModalUnderTest,
)

# modal-fake runs in-process against fake_modal, kubernetes-fake against fake_kubernetes: in
# the fast tier (`pytest -m fast`).
ALL = [
    "local",
    "docker",
    pytest.param("modal-fake", marks=pytest.mark.fast),
    "modal",
    pytest.param("kubernetes-fake", marks=pytest.mark.fast),
]
# fake_modal runs no commands in its sandboxes; fake_kubernetes runs them in the pod's namespaces
RUNS_COMMANDS = ["local", "docker", "modal", pytest.param("kubernetes-fake", marks=pytest.mark.fast)]
ISOLATED = ["docker", "modal"]  # providers that enforce [resources]
FAKE_CREDENTIALS = {"token_id": "ak-fake", "token_secret": "as-fake"}
_not_run: list[str] = []


def modal_unavailable() -> str | None:
    """Why the contract cannot run on Modal's cloud here, or None when it can."""
    try:
        from corral.sandboxes.modal.provider import credentials_missing
    except ImportError as error:
        return f"the modal package is not installed ({error}): pip install 'corral[modal]'"
    return credentials_missing()


@pytest.fixture
def under_test(request, monkeypatch):
    kind = request.param
    if kind == "local":
        return LocalUnderTest()
    if kind == "docker":
        return DockerUnderTest(request.getfixturevalue("docker_engine"))
    if kind == "kubernetes-fake":
        if shutil.which("bwrap") is None:  # out of the tier (and the run) where bwrap is missing
            skip_or_fail_under_ci(NEEDS_BWRAP)
        under = KubernetesUnderTest.serve(request.getfixturevalue("tmp_path"), monkeypatch)
        request.addfinalizer(under.stop)
        return under
    if kind == "modal-fake":
        from corral.sandboxes.modal import provider as modal_provider
        from corral.sandboxes.modal import sandbox as modal_sandbox
        from corral.sandboxes.modal import verify as modal_verify

        fake = fake_modal.fake_modal(FAKE_CREDENTIALS)
        for module in (modal_provider, modal_sandbox, modal_verify):
            monkeypatch.setattr(module, "modal", fake)
        fake_modal.reset_cloud()

        def every_call_fits_the_real_modal() -> None:
            refused = fake_modal.calls_modal_refuses()
            fake_modal.reset_cloud()
            assert refused == [], "the provider called modal in ways the real package refuses"

        request.addfinalizer(every_call_fits_the_real_modal)
        return ModalUnderTest(kind)
    why = modal_unavailable()
    if why is not None:
        message = f"the provider contract did NOT run on Modal's cloud: {why}"
        _not_run.append(f"{request.node.name}: {why}")
        pytest.skip(message)
    return ModalUnderTest(kind)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _not_run:
        terminalreporter.section("the Modal contract run", sep="=", yellow=True)
        terminalreporter.write_line(
            f"NOT RUN on Modal's cloud ({len(_not_run)} tests skipped): {_not_run[0].split(': ', 1)[1]}"
        )
        terminalreporter.write_line("Everything else of the modal provider ran against tests/contract/fake_modal.py.")
        if os.environ.get("CI") == "true":
            terminalreporter.write_line("CI=true: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET in CI to run it.")
