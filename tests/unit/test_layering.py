"""The dependency direction README.md's Layout states, kept by pyproject.toml's import contracts
([tool.importlinter]): a GPU box never needs the server, an env host never torch."""

import importlib
import subprocess
import sys
import tomllib
from graphlib import TopologicalSorter
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # import-linter reads the whole tree
def test_import_contracts_hold():
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(linter)], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 11 kept, 0 broken" in result.stdout


# Each part of corral, and the parts it may import. `corral.errors` is the one module every part
# shares; the protocol is what client and server both speak.
LAYERS: dict[str, set[str]] = {
    "errors": set(),
    "env": {"errors"},
    "protocol": {"errors"},
    "sandboxes": {"env", "errors"},
    "client": {"protocol", "errors"},
    "training": {"client", "protocol", "errors"},
    "server": {"protocol", "sandboxes", "env", "errors"},
    # The `corral` command: it may import every part, and nothing imports it.
    "cli": {"server", "client", "training", "protocol", "sandboxes", "env", "errors"},
}
# Imports made only when called, back down the layers: Bundle.local serves a bundle in-process.
LAZY = {
    ("corral.client.bundle", "corral.server.serving.embedded"),
    ("corral.client.bundle", "corral.server.serving.options"),
}


def test_contracts_name_packages_never_single_modules():
    """A contract that lists modules by hand goes stale as modules come and go (the provider
    contract once missed three): each names packages, and ignores only the exact imports
    Bundle.local makes when called (LAZY), never a pattern."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = []
    for contract in config["contracts"]:
        for key in ("source_modules", "forbidden_modules", "modules", "containers"):
            named += contract.get(key, [])
        for layer in contract.get("layers", []):
            for name in layer.replace(":", "|").split("|"):
                prefix = contract["containers"][0] + "." if contract.get("containers") else ""
                named.append(prefix + name.strip())
        for ignored in contract.get("ignore_imports", []):
            assert "*" not in ignored and tuple(ignored.split(" -> ")) in LAZY, ignored
    # Where a package's own parts are layered, the layers name its modules: the sandboxes'
    # interface (three modules), the server's two top-level modules, the protocol's modules.
    single_modules = {
        name
        for name in named
        if not hasattr(importlib.import_module(name), "__path__") and not name.startswith("corral.protocol.")
    }
    interface = {"corral.sandboxes.base", "corral.sandboxes.env_digest", "corral.sandboxes.runtime_dirs"}
    assert single_modules <= interface | {"corral.server.metrics", "corral.server.formats"}, single_modules


def _part(module: str) -> str:
    return module.split(".")[1]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("corral", cache_dir=None)


def test_every_part_of_corral_imports_only_the_parts_below_it(graph):
    """Every package (and corral.errors) has its place in LAYERS, which import one way: a new
    package, or an import across packages that LAYERS does not allow, is a decision to make
    there (and in pyproject.toml's contracts), not one to slip in."""
    assert {_part(module) for module in graph.modules if module != "corral"} == set(LAYERS)
    TopologicalSorter(LAYERS).prepare()  # raises CycleError on a circle among the packages
    crossing = sorted(
        f"{module} -> {imported}"
        for module in graph.modules
        if module != "corral"
        for imported in graph.find_modules_directly_imported_by(module)
        if _part(imported) != _part(module)
        and _part(imported) not in LAYERS[_part(module)]
        and (module, imported) not in LAZY
    )
    assert crossing == []


def test_no_corral_module_imports_itself_through_another(graph):
    """A circle anywhere in corral (even one only for type checking, or through a lazy import)
    is a layer reaching back past its neighbour: each package's modules import one way, and the
    packages (LAYERS) import each other one way too."""
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
