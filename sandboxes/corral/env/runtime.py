"""Serve one `Env` on stdin/stdout as newline-delimited JSON-RPC 2.0 (MCP's stdio transport).

Methods: MCP's `initialize`, `ping`, `tools/list` and `tools/call`, plus corral's hooks
`corral/reset` ({"task", "copied"?} -> {}), `corral/end_turn` ({"response"} -> {"prompt"}),
`corral/report` (-> {"report"}) and `corral/run_agent` (a harness's agent: corral.env.harness),
which `initialize` declares in `capabilities.experimental.corral` so the server knows it may
call them. Notifications are neither run nor answered. A tool's failure is a tool result with
`isError`, which the agent reads, and its kind in `_meta` (see `jsonrpc.ERROR_TYPE_META`); a
failure of a hook is a JSON-RPC error, which the server reads. The episode goes on after either.
"""

import argparse
import importlib
import json
import os
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

from corral.env import agent, harness, imports, jsonrpc, orphans
from corral.env.arguments import check_arguments
from corral.env.env import Env
from corral.env.jsonrpc import RpcError
from corral.errors import ToolSchemaError

SERVER_VERSION = "corral-env/1"
# Set by a sandbox whose server listens on a Unix socket shared with it (the docker provider):
# the protocol then runs over that socket, and stdin/stdout are left for start-up and stderr.
CHANNEL_VARIABLE = "CORRAL_CHANNEL"
PR_SET_DUMPABLE = 4  # prctl(2)


class LoadError(Exception):
    """The env class cannot be served; the message says why and what to do."""


def main(argv: list[str] | None = None) -> int:
    """`python3 -m corral.env MODULE:CLASS [--path DIR]...`: serve until stdin closes."""
    parser = argparse.ArgumentParser(prog="python3 -m corral.env", description=main.__doc__)
    parser.add_argument("entry", help="the env class, as MODULE:CLASS (e.g. env:GridSim)")
    parser.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder to import from (the current one always is); repeatable",
    )
    args = parser.parse_args(argv)
    try:
        agent.take_identity()  # first: nothing of the env's runs as root
    except (agent.IdentityError, OSError) as exc:
        print(f"corral.env: cannot take on the env's user: {exc}", file=sys.stderr)
        return 2
    if (agent_user := agent.identity()) is not None and os.getpid() == 1:
        orphans.start_reaper(agent_user[0], agent.started, agent.starting)  # the container's init: its orphans are ours
    _out_of_the_agents_reach()
    requests, replies = _take_stdio()
    channel = os.environ.pop(CHANNEL_VARIABLE, None)  # not for the env's code or its children
    if channel:
        requests, replies = _connect(channel, requests, replies)
    sys.path[:0] = [os.path.abspath(p) for p in args.path] + [os.getcwd()]
    _imports_out_of_the_agents_reach()
    imports.guard()  # and what is inside them
    try:
        env = load_env(args.entry)
    except (LoadError, ToolSchemaError) as exc:
        print(f"corral.env: cannot serve {args.entry}: {exc}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - the env's own code failed: show where, then refuse
        traceback.print_exc()
        print(
            f"corral.env: cannot serve {args.entry}: the error above was raised while loading it",
            file=sys.stderr,
        )
        return 2
    Server(env).serve(requests, replies)
    return 0


def _out_of_the_agents_reach() -> None:
    """Make this process non-dumpable (Linux): the agent's processes, though of the env's own
    user, can then neither trace it nor open its memory, environment or descriptors under
    /proc, so none of them can write into the protocol's stream or change what the env
    reports. (A child's execve makes it dumpable again: the agent's shell is not covered.)"""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print(f"corral.env: could not make the env non-dumpable (errno {ctypes.get_errno()})", file=sys.stderr)


def _imports_out_of_the_agents_reach() -> None:
    """Drop from Python's path every folder the agent's user could put a module in (the
    working folder where it is a `writable` one, a PYTHONPATH entry there or in /tmp): a
    module the env or the standard library imports later would otherwise be the agent's code,
    run as the env. The standard library's own folders are root's, so lazy imports stay safe.
    Only a dropped folder other than the working one is said on stderr: the working folder is
    dropped wherever the agent owns it, and its path (one per episode) would make every
    episode's stderr, and so every ending's reason, differ."""
    for entry in [entry for entry in sys.path if agent.within_reach(entry)]:
        if entry not in ("", os.getcwd()):
            print(
                f"corral.env: {entry} is left off the import path: the agent's commands may write there",
                file=sys.stderr,
            )
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)


def _take_stdio() -> tuple[BinaryIO, BinaryIO]:
    """Keep private copies of stdin/stdout for the protocol, away from the env's code.

    fd 1 then points at stderr and fd 0 at /dev/null, so neither a stray `print` nor a child
    process that inherits the descriptors can write into the stream or swallow a request.
    """
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    sys.stdout.flush()
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr  # sys.stdin has read nothing yet, so it now reads /dev/null
    return requests, replies


def _connect(path: str, stdin: BinaryIO, stdout: BinaryIO) -> tuple[BinaryIO, BinaryIO]:
    """The protocol's streams on the server's Unix socket at `path`, in place of stdio.

    Connected before the env loads, so the server knows the env is up as early as it can;
    a socket that cannot be reached is a broken sandbox, said on stderr, never a silent
    switch back to stdio (the server is not reading there).
    """
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        channel.connect(path)
    except OSError as exc:
        print(f"corral.env: cannot connect to the server's socket {path}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    stdin.close()
    stdout.close()
    return channel.makefile("rb"), channel.makefile("wb")


def load_env(entry: str) -> Env:
    """Import `MODULE:CLASS` and build the instance that serves the episode."""
    module_name, _, class_name = entry.partition(":")
    if not module_name or not class_name:
        raise LoadError("expected MODULE:CLASS, e.g. env:GridSim")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise  # the env's module was found, and a module it imports was not
        raise LoadError(
            f"no module named '{exc.name}' in {os.getcwd()} or a --path folder; "
            f"run from the env's folder or pass --path DIR"
        ) from None
    cls: Any = module  # then each attribute named on the way to the class
    for part in class_name.split("."):
        cls = getattr(cls, part, None)
        if cls is None:
            raise LoadError(f"module '{module_name}' has no '{class_name}'; check env.toml's entry")
    if not (isinstance(cls, type) and issubclass(cls, Env)):
        raise LoadError(
            f"'{class_name}' is not a subclass of corral.env.Env; "
            f"subclass it: 'class {class_name.rpartition('.')[2]}(Env):'"
        )
    return cls()


class Server:
    """Answers each request line with one reply line, for one env instance."""

    def __init__(self, env: Env):
        self.env = env
        self.tools = {t["name"]: t for t in type(env).tool_schemas()}
        self.methods: dict[str, Callable[[dict], dict]] = {
            "initialize": self.initialize,
            "ping": lambda params: {},
            "tools/list": lambda params: {"tools": list(self.tools.values())},
            "tools/call": self.call_tool,
            "corral/reset": self.reset,
            "corral/end_turn": self.end_turn,
            "corral/report": self.report,
            "corral/run_agent": self.run_agent,
        }

    def serve(self, requests: BinaryIO, replies: BinaryIO) -> None:
        """Answer requests until end of input."""
        for line in requests:
            if not line.strip():
                continue
            reply = self.answer(line)
            if reply is not None:
                replies.write(jsonrpc.encode(reply) + b"\n")
                replies.flush()

    def answer(self, line: bytes) -> dict | None:
        """The reply to one request line; None for a notification."""
        try:
            message = jsonrpc.decode(line)
        except RpcError as exc:
            return jsonrpc.error(None, exc.code, exc.message)
        if not isinstance(message.get("method"), str):
            return jsonrpc.error(
                message.get("id"),
                jsonrpc.INVALID_REQUEST,
                "invalid request: expected a JSON object with a string 'method'",
            )
        if "id" not in message:
            return None
        request_id, method = message["id"], message["method"]
        params = message.get("params")
        if params is None:  # absent or null: both mean "no params"
            params = {}
        try:
            if method not in self.methods:
                raise RpcError(
                    jsonrpc.METHOD_NOT_FOUND,
                    f"method not found: {method}; the methods are {', '.join(self.methods)}",
                )
            if not isinstance(params, dict):
                raise RpcError(jsonrpc.INVALID_PARAMS, f"invalid params for {method}: expected an object")
            return jsonrpc.result(request_id, self.methods[method](params))
        except RpcError as exc:
            return jsonrpc.error(request_id, exc.code, exc.message, exc.data)

    def initialize(self, params: dict) -> dict:
        """MCP's handshake: the protocol version, the tools, and corral's hooks."""
        version = params.get("protocolVersion")
        if version not in jsonrpc.SUPPORTED_VERSIONS:
            version = jsonrpc.PROTOCOL_VERSION  # the client decides whether it can speak ours
        return {
            "protocolVersion": version,
            "capabilities": {
                "tools": {},
                "experimental": {jsonrpc.CAPABILITY: {"hooks": list(jsonrpc.HOOKS)}},
            },
            "serverInfo": {"name": type(self.env).__name__, "version": SERVER_VERSION},
        }

    def call_tool(self, params: dict) -> dict:
        """Run one tool; every failure is a result the agent reads, not a protocol error."""
        name, arguments = params.get("name"), params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise RpcError(
                jsonrpc.INVALID_PARAMS,
                'invalid params for tools/call: expected {"name": str, "arguments": object}',
            )
        if name not in self.tools:
            offered = ", ".join(self.tools) or "none"
            return _tool_error(f"unknown tool '{name}'; the tools are: {offered}", "tool_not_found")
        problems = check_arguments(self.tools[name], arguments)
        if problems:
            return _tool_error(problems, "invalid_args")
        try:
            value = getattr(self.env, name)(**arguments)
        except Exception as exc:  # noqa: BLE001 - any failure of a tool is the agent's to read
            traceback.print_exc()
            return _tool_error(f"{name} failed: {type(exc).__name__}: {exc}", "execution_error")
        try:
            text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            return _tool_error(
                f"{name} failed: it returned a value that is not JSON ({exc}); "
                f"return a str, or numbers, lists and dicts",
                "execution_error",
            )
        result = {"content": [{"type": "text", "text": text}], "isError": False}
        if isinstance(value, dict):
            result["structuredContent"] = value
        return result

    def reset(self, params: dict) -> dict:
        """Start the episode with the task's args; `copied`: in a fork's copy of an episode of
        it, whose files are then replaced by the episode's (fork = "copy")."""
        task = params.get("task")
        if not isinstance(task, dict):
            raise RpcError(jsonrpc.INVALID_PARAMS, 'invalid params for corral/reset: expected {"task": object}')
        copied = params.get("copied", False)
        if not isinstance(copied, bool):
            raise RpcError(jsonrpc.INVALID_PARAMS, 'invalid params for corral/reset: "copied" is true or false')
        _run_hook(self.env.resume if copied else self.env.reset, task)
        return {}

    def end_turn(self, params: dict) -> dict:
        """The next turn's prompt after the agent's reply, or null to end the episode."""
        response = params.get("response")
        if not isinstance(response, str):
            raise RpcError(
                jsonrpc.INVALID_PARAMS,
                'invalid params for corral/end_turn: expected {"response": str}',
            )
        prompt = _run_hook(self.env.end_turn, response)
        if prompt is not None and not isinstance(prompt, str):
            raise RpcError(
                jsonrpc.SERVER_ERROR,
                f"end_turn returned {type(prompt).__name__}; return the next "
                f"prompt as a str, or None to end the episode",
            )
        return {"prompt": prompt}

    def report(self, params: dict) -> dict:
        """What the verifiers grade."""
        report = _run_hook(self.env.report)
        try:
            if not isinstance(report, dict):
                raise TypeError(f"it is a {type(report).__name__}, not a dict")
            json.dumps(report)
        except (TypeError, ValueError) as exc:
            raise RpcError(
                jsonrpc.SERVER_ERROR,
                f"report returned a value that is not a JSON object ({exc}); "
                f"return a dict of str, numbers, lists and dicts",
            ) from None
        return {"report": report}

    def run_agent(self, params: dict) -> dict:
        """A harness episode's agent, run to its end (corral.env.harness)."""
        if not (
            isinstance(params.get("command"), list)
            and isinstance(params.get("environment"), dict)
            and isinstance(params.get("socket"), str)
            and isinstance(params.get("port"), int)
            and isinstance(params.get("timeout_s"), int | float)
        ):
            raise RpcError(
                jsonrpc.INVALID_PARAMS,
                "invalid params for corral/run_agent: expected command, environment, socket, port, timeout_s",
            )
        return _run_hook(harness.run_agent, params)


def _run_hook(hook: Callable, *args: Any) -> Any:
    """Call reset, end_turn or report; an exception becomes a -32000 error with its traceback."""
    try:
        return hook(*args)
    except Exception as exc:  # noqa: BLE001 - any failure of a hook is the server's to read
        trace = traceback.format_exc()
        print(trace, file=sys.stderr, end="")
        raise RpcError(jsonrpc.SERVER_ERROR, f"{type(exc).__name__}: {exc}", {"traceback": trace}) from None


def _tool_error(text: str, error_type: str) -> dict:
    """A failed tools/call result: the text the agent reads, and its kind for the server."""
    return {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {jsonrpc.ERROR_TYPE_META: error_type},
    }
