"""The corral server: serves a bundle's tasks as OpenEnv environments."""

from corral.server.app import create_app
from corral.server.served import BundleProblems, ServedBundle, ServeOptions

__all__ = ["BundleProblems", "ServeOptions", "ServedBundle", "create_app"]
