"""Survivors that cannot change what the code does: kinds that never can (an assert, a
tuning constant, a float clock's bound), and those read and explained one by one."""

from __future__ import annotations

import ast
import functools
import re

from mutation_targets import REPO

# Reasons several survivors share.
QUOTE_DEFAULT = "how much of an env's stderr an error quotes by default: a character more or less is as good"
AGENT_STOPPED = "it only spares a second verifier the stop of the agent's processes, which the first one's left gone"
NEVER_STDIN = "the descriptor is never 0, the server's stdin, which stays open for the server's life"
RANDOM_NAME = "the length of a random name: a hex digit more or less names them apart as well"
FIRST_BYTE_NEWLINE = (
    "it misses a newline only as the buffer's first byte, an empty line, which then comes as leading "
    "whitespace of the next line, which JSON's decoder skips (as the server skips a line that is "
    "not JSON)"
)

# Survivors read and found harmless one by one: (module path, the line's code) -> why.
EXPLAINED = {
    (
        "server/corral/server/serving/sessions.py",
        "if self._reaper is not None:",
    ): "the serving loop ends under asyncio.run, which cancels a reaper left running; close_all "
    "cancels it first only so that it releases no session while close_all does",
    (
        "client/corral/client/session.py",
        "def __init__(self, url: str, *, token: str | None = None, keepalive_s: float = 20.0):",
    ): "a default keepalive period: a second more or less keeps a socket alive as well",
    (
        "sandboxes/corral/sandboxes/local/sandbox.py",
        "def stderr_tail(self, max_chars: int = 4000) -> str:",
    ): QUOTE_DEFAULT,
    (
        "sandboxes/corral/sandboxes/local/sandbox.py",
        "self.verifications = 0",
    ): "the count only names each verification's folder (verify-1, verify-2, ...); any start names them apart",
    ("sandboxes/corral/sandboxes/local/sandbox.py", "self._agent_stopped = True"): AGENT_STOPPED,
    (
        "sandboxes/corral/sandboxes/local/sandbox.py",
        "self._stderr = -1",
    ): "the mark of a closed stderr: nothing reads a sandbox's tail once it is closed (the episode and the "
    "warm pool quote it before), and a second close returns at once",
    ("sandboxes/corral/sandboxes/local/sandbox.py", "if self._stderr >= 0:"): NEVER_STDIN,
    ("sandboxes/corral/sandboxes/local/provider.py", "if self._lock >= 0 or not self.named:"): NEVER_STDIN,
    ("sandboxes/corral/sandboxes/local/provider.py", "if self._lock >= 0:"): NEVER_STDIN,
    (
        "sandboxes/corral/sandboxes/local/sandbox.py",
        'return os.pread(self._stderr, size - start, start).decode("utf-8", errors="replace")',
    ): "a read from `start` stops at the file's end: asking for more bytes than are left reads the same",
    (
        "sandboxes/corral/sandboxes/local/files.py",
        "os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)",
    ): "`& 0o101` differs only for a file that others may run and its owner may not",
    (
        "sandboxes/corral/sandboxes/local/files.py",
        'target = shared / f"{spec.env_name}-{uuid.uuid4().hex[:8]}"',
    ): RANDOM_NAME,
    (
        "sandboxes/corral/sandboxes/local/provider.py",
        "def __init__(self, *, instance: str | None = None, warm_pool: int = 0) -> None:",
    ): "WarmPools keeps no pool for any size below 1: -1 is as good as 0",
    (
        "sandboxes/corral/env/runtime.py",
        "sys.path[:0] = [os.path.abspath(p) for p in args.path] + [os.getcwd()]",
    ): "run as `python -m corral.env`, the first entry of sys.path is the working folder, which the list put "
    "in its place (`[:1]`) holds too",
    (
        "sandboxes/corral/sandboxes/docker/sandbox.py",
        'api.attach_socket, container_id, {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}',
    ): "the engine reads each of attach's flags as true or false: 2 is as true as 1",
    (
        "sandboxes/corral/sandboxes/modal/sandbox.py",
        "def stderr_tail(self, max_chars: int = 4000) -> str:",
    ): QUOTE_DEFAULT,
    ("sandboxes/corral/sandboxes/modal/sandbox.py", "self._agent_stopped = True"): AGENT_STOPPED,
    (
        "sandboxes/corral/sandboxes/modal/sandbox.py",
        "for reader in self._readers:",
    ): "the readers end on their own a moment later: the termination that on_close starts ends both streams",
    # The buffers every provider but the local one reads its env's output into (moved from the modal sandbox).
    (
        "sandboxes/corral/sandboxes/shared/stream_buffers.py",
        "self._stderr_size = 0",
    ): "the count of stderr bytes kept, one off: the trim keeps a byte more or less of STDERR_KEEP",
    (
        "sandboxes/corral/sandboxes/shared/stream_buffers.py",
        'while (end := self._stdout.find(b"\\n", scanned)) < 0:',
    ): FIRST_BYTE_NEWLINE,
    ("sandboxes/corral/sandboxes/shared/stream_buffers.py", "scanned = 0"): FIRST_BYTE_NEWLINE,
    (
        "sandboxes/corral/sandboxes/shared/stream_buffers.py",
        "def stderr_tail(self, max_chars: int = 4000) -> str:",
    ): QUOTE_DEFAULT,
    (
        "sandboxes/corral/sandboxes/modal/sandbox.py",
        "timeout_s: float, max_output_chars: int = 20_000) -> CommandResult:",
    ): "how much of a verifier's output is kept by default: a character more or less is as good",
    ("sandboxes/corral/sandboxes/docker/sandbox.py", "self._agent_stopped = True"): AGENT_STOPPED,
    (
        "sandboxes/corral/sandboxes/docker/sandbox.py",
        (
            'tail = f"{session}-{episode}" if session and episode else '
            "f\"{labels.get('corral.purpose', 'env')}-{uuid.uuid4().hex[:8]}\""
        ),
    ): "the server labels an episode's container with both its session and its episode, or neither",
    (
        "sandboxes/corral/sandboxes/docker/sandbox.py",
        'return _safe_name(f"corral-{instance}-{env_name}-warm-{uuid.uuid4().hex[:8]}")',
    ): RANDOM_NAME,
    (
        "client/corral/client/session.py",
        "self.url = urls[0]",
    ): "with several hosts the first reset picks the host and moves there; before it, a request finds no "
    "episode on any host and gets the same answer from each",
    (
        "client/corral/client/session.py",
        "if self._hosts is not None and not isinstance(error, ReplyTimeout):",
    ): "marking a host lost only makes the next pick ask its health afresh: a dead host picked on stale news "
    "fails its socket at the reset, is marked lost there and left for another (the run ends the same, "
    "one attempt later); a slow host marked lost answers the fresh ask and is picked as before",
}


def equivalence(result: dict, line: str, path: str) -> str | None:
    """Why a surviving mutant cannot change what the code does: a kind that never can, or one
    read and explained in EXPLAINED."""
    code = line.split("  # ")[0].strip()  # a line's code, without its comment
    if (path, code) in EXPLAINED:
        return EXPLAINED[path, code]
    if code.startswith("assert "):
        return "an assert that only narrows a type for the type checker"
    if (
        re.match(r"@dataclass\(.*frozen=True", code)
        and result["operator"] == "ReplaceTrueWithFalse"
        and "frozen=False" in result.get("diff", "")
    ):
        return "nothing assigns to the dataclass's fields, frozen or not"
    if result["operator"] == "NumberReplacer" and re.match(r"[A-Z][A-Z0-9_]* = ", code):
        return "a tuning constant: a value one off is as good"
    if result["operator"] in BOUNDARY_FLIPS and re.search(r"monotonic\(\)|\bnow\b|_time_left\(\)", code):
        return "`<` for `<=` on a reading of a float clock, which never lands on the bound itself"
    if (
        result["operator"] == "NumberReplacer"
        and "_time_left() <= 0" in code
        and "_time_left() <= 1" in result.get("diff", "")
    ):
        return (
            "the agent's time budget ends a second early: a tuning constant of sorts, as budgets are minutes "
            "(a test timing a call within a budget's last second would fail on a busy machine)"
        )
    if result["operator"] == "RemoveDecorator" and result["line"] in protocol_lines(path):
        return "a member of a typing.Protocol: the type checker reads it, no code runs it"
    return None


@functools.cache
def protocol_lines(path: str) -> frozenset[int]:
    """The lines of the module's typing.Protocol classes (interfaces: their bodies never run)."""
    return frozenset(
        line
        for node in ast.walk(ast.parse((REPO / path).read_text()))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).split(".")[-1].startswith("Protocol") for base in node.bases)
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    )


BOUNDARY_FLIPS = {f"ReplaceComparisonOperator_{flip}" for flip in ("Lt_LtE", "LtE_Lt", "Gt_GtE", "GtE_Gt")}
