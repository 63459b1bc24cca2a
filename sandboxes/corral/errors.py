"""Every error corral raises for a user to catch: `CorralError`, and one subclass per cause.

    try:
        env = Bundle("http://env-host:8000")
    except corral.errors.ServerUnreachable:
        ...

Each message names the thing, what was wrong and the fix. Where an error used to be a builtin
one it still is (`ServerUnreachable` is a `ConnectionError`, `BundleInvalid` a `ValueError`),
so code that caught the builtin keeps working. Standard library only: the env SDK, which runs
inside every sandbox, raises `ToolSchemaError` from here too.

These are what a caller catches; how an episode's failure ends it (whose doing, what it scores,
where it is recorded) is corral.server.episodes.endings' rule, in its docstring.
"""

from __future__ import annotations

from collections.abc import Sequence


class CorralError(Exception):
    """The base of every error corral raises on purpose."""


# Bundles, envs and serving ---------------------------------------------------------------


class BundleInvalid(CorralError, ValueError):
    """A bundle cannot be served; the message lists every problem, each with its file and fix."""

    def __init__(self, root: object, problems: Sequence[object]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"{root} has {len(self.problems)} problem(s):\n{lines}")


class ToolSchemaError(CorralError, TypeError):
    """An env's tools cannot be described; the message names each tool, parameter and fix."""


class ConfigError(CorralError, ValueError):
    """A setting that cannot work (an unknown sandbox, a missing extra, a port in use)."""


class SandboxError(CorralError):
    """A sandbox could not be started, or its env process is gone."""


class ImageError(SandboxError):
    """An env's image could not be built or found; the message says which and why."""


class VerifierError(CorralError):
    """A verifier could not be loaded, raised, or returned something that is not a score."""


class RewardError(CorralError, ValueError):
    """An episode's scores and the reward rule do not fit together."""


class ServeFailed(CorralError, RuntimeError):
    """A server could not start serving (the one `Bundle.local` starts in-process)."""


class GenerationError(CorralError, RuntimeError):
    """The model server (vLLM) refused a completion, or answered without what corral needs."""


class CaptureNotTrainable(CorralError, ValueError):
    """A harness episode's capture has no engine token ids (its level is below `tokens`), so it
    has no training trace: an eval episode, never a silently empty one."""


# The client's side of the wire ------------------------------------------------------------


class BadURL(CorralError, ValueError):
    """A server URL corral cannot use as given; the message shows the one to pass."""


class ServerUnreachable(CorralError, ConnectionError):
    """No corral server answers at the URL."""


class AuthError(CorralError, PermissionError):
    """The server wants a bearer token. The message says to pass it as `token=...` (Python);
    `passed_as("--token TOKEN")` is the same refusal for a command line."""

    def __init__(self, url: str, how: str = "token=..."):
        self.url, self.how = url, how
        super().__init__(self.explain(url, how))

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # pickles as it was made, not by its message
        return type(self), (self.url, self.how)

    def passed_as(self, how: str) -> AuthError:
        """The same refusal, saying to pass the token as `how` (e.g. `--token TOKEN`)."""
        return type(self)(self.url, how)

    @staticmethod
    def explain(url: str, how: str) -> str:
        return f"the server at {url} wants a bearer token: pass {how} or set CORRAL_TOKEN"


class TokenMissing(AuthError):
    """The server wants a token, and none was sent."""

    @staticmethod
    def explain(url: str, how: str) -> str:
        return (
            f"the server at {url} wants a bearer token and none was sent: pass {how} "
            "or set CORRAL_TOKEN to the token it was served with (corral serve --token)"
        )


class TokenRefused(AuthError):
    """The server refused the token that was sent."""

    @staticmethod
    def explain(url: str, how: str) -> str:
        return (
            f"the server at {url} refused the bearer token it was sent: pass the token it was served "
            f"with ({how} or CORRAL_TOKEN)"
        )


class UnknownSplit(CorralError, ValueError):
    """A split the bundle does not have (or one without tasks)."""


class BundleMismatch(CorralError, ValueError):
    """Env hosts given to one `Bundle` serve different bundles; the message says what differs."""


class ServerError(CorralError):
    """The server answered a frame with an `error` frame: `code` is OpenEnv's error code."""

    def __init__(self, code: str, message: str, data: dict | None = None):
        super().__init__(f"{message} (code: {code})")
        self.code = code
        self.data = data or {}


class CapacityError(ServerError):
    """The server is at its session limit."""


class SessionLost(CorralError, ConnectionError):
    """The session's socket closed, or the server stopped answering, mid-request."""


class ReplyTimeout(SessionLost, TimeoutError):
    """The server did not answer within the time the request allows."""


class NoEpisode(CorralError, RuntimeError):
    """A tool was called before `reset` started an episode."""


class ToolsetMismatch(CorralError, ValueError):
    """A task offers other tools than the environment class playing it was built for."""
