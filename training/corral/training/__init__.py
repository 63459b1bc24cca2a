"""Training against corral with TRL: algorithm presets, token-exact rollouts, recipes' helpers.

Depends on the client only (`corral.client`), never on the server: a GPU box installs
`corral[train]` and trains against a bundle served elsewhere.
"""

from typing import Any

__all__ = ["evaluate"]


def __getattr__(name: str) -> Any:
    # `corral.training.evaluate` without importing torch and TRL for `import corral.training`.
    if name == "evaluate":
        from corral.training.evaluation import evaluate

        return evaluate
    raise AttributeError(f"module 'corral.training' has no attribute {name!r}")
