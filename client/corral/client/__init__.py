"""corral's client: a served bundle as a dataset and TRL environment classes."""

from corral.client.bundle import Bundle
from corral.client.factory import CorralEnvironment, EnvironmentSpec, environment_class
from corral.client.session import CapacityError, ServerError, Session

__all__ = [
    "Bundle",
    "CapacityError",
    "CorralEnvironment",
    "EnvironmentSpec",
    "ServerError",
    "Session",
    "environment_class",
]
