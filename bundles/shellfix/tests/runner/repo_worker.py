"""The repository's side of run_tests.py: imports the agent's modules and runs the tests' calls.

Started by run_tests.py as `python3 -I -B repo_worker.py` in the repository's folder, which it
appends to its import path (after the standard library). It reads one request per line on
stdin and answers each on its own copy of stdout (the repository's prints go to stderr, so
they cannot corrupt the answers):

    ("import", name)                  -> ("value", module)
    ("getattr", handle, name)         -> ("value", value)
    ("call", handle, args, kwargs)    -> ("value", value)
    ("op", handle, "len"|"bool"|"list"|"getitem"|"contains", args)
    any of them                       -> ("raise", exception class, message)

Values travel as wire.py says. Nothing this process answers is trusted: it runs the agent's
code, which may end it, lie, or hang, and run_tests.py is built for all three.

Before it imports anything of the repository's, it gives up reading the runner's folder, the
hidden tests included, with Linux's Landlock (allowed to any process, no privileges needed):
code that read the tests could answer each call with the value the test expects. Where
Landlock is refused, it exits before importing anything, and the tests fail.
"""

import ctypes
import os
import stat
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wire  # from this folder, before the repository is on the path

del sys.path[0]
MAX_MESSAGE_CHARS = 2000
REFUSED_EXIT = 3  # the tests cannot be hidden: nothing of the repository's is imported
OPS = {"len": len, "bool": bool, "list": list, "getitem": lambda obj, key: obj[key],
       "contains": lambda obj, item: item in obj}


class Objects:
    """The worker's objects that the runner holds handles to (kept alive, so ids stay unique)."""

    def __init__(self):
        self.by_handle = []
        self.handle_of = {}

    def tag(self, value):
        handle = self.handle_of.get(id(value))
        if handle is None:
            handle = self.handle_of[id(value)] = len(self.by_handle)
            self.by_handle.append(value)
        return ("obj", handle, kind_of(value), name_of(value), builtin_base(value))

    def find(self, data):
        if data[0] != "ref" or type(data[1]) is not int or not 0 <= data[1] < len(self.by_handle):
            raise wire.Garbage(f"no object {data[1:]!r}")
        return self.by_handle[data[1]]

    def value(self, value):
        return wire.encode(value, self.tag)


def kind_of(value):
    if isinstance(value, type):
        return "class"
    if isinstance(value, types.ModuleType):
        return "module"
    return "callable" if callable(value) else "object"


def name_of(value):
    name = getattr(value, "__name__", None) if isinstance(value, (type, types.ModuleType, types.FunctionType)) else None
    return name if type(name) is str else type(value).__name__


def builtin_base(value):
    """For an exception class: the name of its nearest builtin base class."""
    if isinstance(value, type) and issubclass(value, BaseException):
        return next(base.__name__ for base in value.__mro__ if base.__module__ == "builtins")
    return None


def answer(objects, request):
    op = request[0]
    if op == "import" and type(request[1]) is str:
        __import__(request[1])
        return ("value", objects.value(sys.modules[request[1]]))
    target = objects.find(("ref", request[1]))
    if op == "getattr" and type(request[2]) is str:
        return ("value", objects.value(getattr(target, request[2])))
    if op == "call":
        args = wire.decode(request[2], objects.find)
        kwargs = wire.decode(request[3], objects.find)
        return ("value", objects.value(target(*args, **kwargs)))
    if op == "op" and request[2] in OPS:
        args = wire.decode(request[3], objects.find)
        return ("value", objects.value(OPS[request[2]](target, *args)))
    raise wire.Garbage(f"no request {op!r}")


def failure(objects, error):
    try:
        message = str(error)[:MAX_MESSAGE_CHARS]
    except BaseException:  # noqa: BLE001 - the repository's __str__ may raise anything
        message = "(its message could not be read)"
    return ("raise", objects.tag(type(error)), message)


# Landlock (linux/landlock.h): the syscalls' numbers are the same on x86-64 and arm64.
CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446
READ_FILE, READ_DIR = 1 << 2, 1 << 3
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def hide(folder):
    """Stop this process (and all it starts) from reading anything under `folder`: reading
    is allowed beneath every entry of each folder above it, except the entry on the way to
    it; entries of a folder this process cannot list stay unreadable. False when the kernel
    offers no Landlock."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    handled = ctypes.c_uint64(READ_FILE | READ_DIR)
    ruleset = libc.syscall(CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    hidden = os.path.realpath(folder)
    above = os.path.dirname(hidden)
    while True:
        try:
            entries = list(os.scandir(above))
        except OSError:
            entries = []
        for entry in entries:
            if entry.path == hidden:
                continue
            try:
                fd = os.open(entry.path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            access = READ_FILE | READ_DIR if stat.S_ISDIR(os.fstat(fd).st_mode) else READ_FILE
            rule = PathBeneath(access, fd)
            libc.syscall(ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0))
            os.close(fd)
        if above == os.path.dirname(above):
            break
        hidden, above = above, os.path.dirname(above)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "Landlock refused to restrict this process")
    os.close(ruleset)
    return True


def main():
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the repository's prints: to stderr, never into the answers
    if not (sys.platform.startswith("linux") and hide(Path(__file__).resolve().parent)):
        # Fail closed: code that could read the tests could answer each call from them.
        print(
            "[run_tests] Landlock is refused here (the kernel lacks it, or a seccomp profile refuses its calls), "
            "so the repository's code could read the tests: none of it runs, and the tests fail. Run the "
            "verifier on Linux 5.13 or later with Landlock enabled and allowed by the sandbox's seccomp profile",
            file=sys.stderr,
        )
        sys.exit(REFUSED_EXIT)
    sys.path.append(os.getcwd())
    objects = Objects()
    while line := requests.readline(wire.MAX_LINE + 1):
        try:
            reply = wire.dumps(answer(objects, wire.loads(line)))
        except BaseException as error:  # noqa: BLE001 - SystemExit too: the runner decides what it means
            try:
                reply = wire.dumps(failure(objects, error))
            except BaseException:  # noqa: BLE001
                reply = wire.dumps(failure(objects, RuntimeError("the answer could not be written")))
        answers.write(reply)
        answers.flush()


if __name__ == "__main__":
    main()
