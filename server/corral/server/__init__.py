"""The corral server: serves a bundle's tasks as OpenEnv environments.

Its names load on first use, so a process that needs one module of the server (a verifier
worker, which imports `corral.server.bundles.verifiers`) does not import the web app with it.
"""

import importlib
from typing import Any

__all__ = ["BundleInvalid", "ServeOptions", "ServedBundle", "create_app"]
_HOMES = {
    "BundleInvalid": "corral.errors",
    "create_app": "corral.server.serving.app",
    "ServedBundle": "corral.server.serving.served",
    "ServeOptions": "corral.server.serving.options",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'corral.server' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
