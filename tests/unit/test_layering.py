"""The dependency direction README.md's Layout states, kept by pyproject.toml's import contracts
([tool.importlinter]): a GPU box never needs the server, an env host never torch."""

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # import-linter reads the whole tree
def test_import_contracts_hold():
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(linter)], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 9 kept, 0 broken" in result.stdout


def test_no_corral_module_imports_itself_through_another():
    """A circle anywhere in corral (even one only for type checking, or through a lazy import)
    is a layer reaching back past its neighbour: each package's modules import one way, and the
    packages (client, server, sandboxes, training, env) import each other one way too."""
    graph = grimp.build_graph("corral", cache_dir=None)
    packages = {module.split(".")[1] for module in graph.modules if module.count(".") == 1}
    assert {"client", "server", "sandboxes", "training", "env"} <= packages
    circles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                circles.append(" -> ".join((module, *back)))
    assert circles == []


@pytest.mark.slow  # the client in a fresh interpreter
def test_the_client_imports_without_the_server_or_torch():
    code = (
        "import sys; import corral.client; "
        "bad = [m for m in ('fastapi', 'uvicorn', 'torch', 'trl', 'corral.server') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
