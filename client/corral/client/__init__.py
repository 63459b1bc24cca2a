"""corral's client: a served bundle as a dataset and TRL environment classes."""

from corral.client.bundle import Bundle
from corral.client.episode import Episode
from corral.client.factory import CorralEnvironment, EnvironmentSpec, environment_class
from corral.client.session import Session
from corral.errors import CapacityError, ServerError

__all__ = [
    "Bundle",
    "CapacityError",
    "CorralEnvironment",
    "EnvironmentSpec",
    "Episode",
    "ServerError",
    "Session",
    "environment_class",
]
