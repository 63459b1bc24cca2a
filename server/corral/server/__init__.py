"""The corral server: serves a bundle's tasks as OpenEnv environments."""

from corral.errors import BundleInvalid
from corral.server.app import create_app
from corral.server.served import ServedBundle, ServeOptions

__all__ = ["BundleInvalid", "ServeOptions", "ServedBundle", "create_app"]
