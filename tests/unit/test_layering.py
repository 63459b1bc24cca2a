"""The dependency direction of DESIGN.md: a GPU box never needs the server, an env host never torch."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(linter)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken" in result.stdout


def test_the_client_imports_without_the_server_or_torch():
    code = (
        "import sys; import corral.client; "
        "bad = [m for m in ('fastapi', 'uvicorn', 'torch', 'trl', 'corral.server') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
