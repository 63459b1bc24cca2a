"""The dependency direction README.md's Layout states, kept by pyproject.toml's import contracts
([tool.importlinter]): a GPU box never needs the server, an env host never torch."""

import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(linter)], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 7 kept, 0 broken" in result.stdout


def test_no_sandbox_module_imports_itself_through_another():
    """A circle among the sandbox modules (even one only for type checking) is a layer
    reaching back past its neighbour: the provider's pieces share an engine, not each other."""
    graph = grimp.build_graph("corral", cache_dir=None)
    sandboxes = {m for m in graph.modules if m == "corral.sandboxes" or m.startswith("corral.sandboxes.")}
    circles = []
    for module in sorted(sandboxes):
        for imported in sorted(graph.find_modules_directly_imported_by(module) & sandboxes):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                circles.append(" -> ".join((module, *back)))
    assert circles == []


def test_the_client_imports_without_the_server_or_torch():
    code = (
        "import sys; import corral.client; "
        "bad = [m for m in ('fastapi', 'uvicorn', 'torch', 'trl', 'corral.server') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
