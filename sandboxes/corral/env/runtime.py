"""Serve one `Env` on stdin/stdout as newline-delimited JSON-RPC 2.0 (MCP's stdio transport).

Methods: MCP's `initialize`, `ping`, `tools/list` and `tools/call`, plus corral's
`corral/reset` ({"task"} -> {}), `corral/end_turn` ({"response"} -> {"prompt"}) and
`corral/report` (-> {"report"}). Notifications are neither run nor answered. A tool's failure
is a tool result with `isError`, which the agent reads; a failure of reset, end_turn or report
is a JSON-RPC error, which the server reads. The episode goes on after either.
"""

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

from corral.env.arguments import check_arguments
from corral.env.env import Env
from corral.env.schema import ToolSchemaError

PROTOCOL_VERSION = "2025-06-18"
SERVER_VERSION = "corral-env/1"


class RpcError(Exception):
    """A JSON-RPC error response: `code`, `message` and optional `data`."""

    def __init__(self, code: int, message: str, data: dict | None = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


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
    requests, replies = _take_stdio()
    sys.path[:0] = [os.path.abspath(p) for p in args.path] + [os.getcwd()]
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
    cls = module
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
        }

    def serve(self, requests: BinaryIO, replies: BinaryIO) -> None:
        """Answer requests until end of input."""
        for line in requests:
            if not line.strip():
                continue
            reply = self.answer(line)
            if reply is not None:
                text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
                # A lone surrogate cannot be UTF-8; backslashreplace writes it as JSON's \udXXX.
                replies.write(text.encode("utf-8", "backslashreplace") + b"\n")
                replies.flush()

    def answer(self, line: bytes) -> dict | None:
        """The reply to one request line; None for a notification."""
        try:
            message = json.loads(line)
        except ValueError as exc:
            return _error(None, RpcError(-32700, f"parse error: {exc}"))
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            request_id = message.get("id") if isinstance(message, dict) else None
            return _error(
                request_id,
                RpcError(-32600, "invalid request: expected a JSON object with a string 'method'"),
            )
        if "id" not in message:
            return None
        request_id, method, params = message["id"], message["method"], message.get("params", {})
        try:
            if method not in self.methods:
                raise RpcError(
                    -32601, f"method not found: {method}; the methods are {', '.join(self.methods)}"
                )
            if not isinstance(params, dict):
                raise RpcError(-32602, f"invalid params for {method}: expected an object")
            return {"jsonrpc": "2.0", "id": request_id, "result": self.methods[method](params)}
        except RpcError as exc:
            return _error(request_id, exc)

    def initialize(self, params: dict) -> dict:
        """MCP's handshake: what this server is and that it offers tools."""
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": type(self.env).__name__, "version": SERVER_VERSION},
        }

    def call_tool(self, params: dict) -> dict:
        """Run one tool; every failure is a result the agent reads, not a protocol error."""
        name, arguments = params.get("name"), params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise RpcError(
                -32602, 'invalid params for tools/call: expected {"name": str, "arguments": object}'
            )
        if name not in self.tools:
            offered = ", ".join(self.tools) or "none"
            return _tool_result(f"unknown tool '{name}'; the tools are: {offered}", error=True)
        problems = check_arguments(self.tools[name], arguments)
        if problems:
            return _tool_result(problems, error=True)
        try:
            value = getattr(self.env, name)(**arguments)
        except Exception as exc:  # noqa: BLE001 - any failure of a tool is the agent's to read
            traceback.print_exc()
            return _tool_result(f"{name} failed: {type(exc).__name__}: {exc}", error=True)
        try:
            text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            return _tool_result(
                f"{name} failed: it returned a value that is not JSON ({exc}); "
                f"return a str, or numbers, lists and dicts",
                error=True,
            )
        result = _tool_result(text, error=False)
        if isinstance(value, dict):
            result["structuredContent"] = value
        return result

    def reset(self, params: dict) -> dict:
        """Start the episode with the task's args."""
        task = params.get("task")
        if not isinstance(task, dict):
            raise RpcError(-32602, 'invalid params for corral/reset: expected {"task": object}')
        _run_hook(self.env.reset, task)
        return {}

    def end_turn(self, params: dict) -> dict:
        """The next turn's prompt after the agent's reply, or null to end the episode."""
        response = params.get("response")
        if not isinstance(response, str):
            raise RpcError(-32602, 'invalid params for corral/end_turn: expected {"response": str}')
        prompt = _run_hook(self.env.end_turn, response)
        if prompt is not None and not isinstance(prompt, str):
            raise RpcError(
                -32000,
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
                -32000,
                f"report returned a value that is not a JSON object ({exc}); "
                f"return a dict of str, numbers, lists and dicts",
            ) from None
        return {"report": report}


def _run_hook(hook: Callable, *args: Any) -> Any:
    """Call reset, end_turn or report; an exception becomes a -32000 error with its traceback."""
    try:
        return hook(*args)
    except Exception as exc:  # noqa: BLE001 - any failure of a hook is the server's to read
        trace = traceback.format_exc()
        print(trace, file=sys.stderr, end="")
        raise RpcError(-32000, f"{type(exc).__name__}: {exc}", {"traceback": trace}) from None


def _tool_result(text: str, *, error: bool) -> dict:
    """An MCP tools/call result holding one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _error(request_id: Any, exc: RpcError) -> dict:
    """A JSON-RPC error response."""
    error: dict = {"code": exc.code, "message": exc.message}
    if exc.data is not None:
        error["data"] = exc.data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}
