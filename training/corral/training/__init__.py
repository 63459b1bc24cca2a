"""Training against corral with TRL: algorithm presets, token-exact rollouts, recipes' helpers.

    from corral.training import CorralRollout, evaluate, preset

Depends on the client only (`corral.client`), never on the server: a GPU box installs
`corral[train]` and trains against a bundle served elsewhere.
"""

import importlib
from typing import Any

# Each name, by the module that defines it: imported on first use, so `import corral.training`
# stays light (no torch, TRL or accelerate until a name that needs them is asked for).
_EXPORTS = {
    "preset": "corral.training.presets",
    "CorralRollout": "corral.training.rollouts",
    "evaluate": "corral.training.evaluation",
}
__all__ = ["CorralRollout", "evaluate", "preset"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'corral.training' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
