"""Run one task's hidden tests against the repository, with the repository's code kept out of
this process.

The command verifier runs `python3 -I -B run_tests.py` in the repository's folder after the
agent's last turn; the exit status is the verdict: 0 when every test ran and passed, else 1.

Why the repository's code never runs here: code that runs in a process can end it with any
status (`os._exit(0)` when imported) or patch whatever decides the verdict (`unittest`'s
result), and no sandbox can tell that apart from passing tests. So this process runs the
unchanged `test_*.py` files of its own folder, and their imports of the repository's modules
(`from batching import chunks`) are answered by proxies: each call, attribute and exception
is carried out by a child process, repo_worker.py, which imports the repository, and comes
back as a plain value rebuilt here by `ast.literal_eval` (wire.py). What the tests compare is
therefore built here from literals: an object whose `__eq__` always says yes stays in the
child, and equals nothing. An exception from the repository is raised here as its nearest
builtin class (a class of the repository's, such as `OutOfStock`, becomes a local subclass of
it), so `unittest.SkipTest` or `SystemExit` from the repository is an error, never a skip or
an exit. A child that dies, hangs or answers garbage fails the tests.

Before the child starts, this process makes itself non-dumpable, so the child, which runs as
the same user, cannot trace it or write its memory (the child's Landlock domain, which keeps
it from reading the tests, forbids tracing this process too: either one stops it). `-I` keeps the working directory and
PYTHONPATH off the import path; this process moves to its own folder (which only root can
write where the sandbox allows it) and never puts the repository on its path.
"""

import builtins
import importlib.abc
import importlib.util
import os
import subprocess
import sys
import traceback
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import wire  # from this folder only

del sys.path[0]
PR_SET_DUMPABLE = 4


class RepositoryError(Exception):
    """The repository's code failed in a way no test expects: it raised SystemExit or
    KeyboardInterrupt, its process died, or it answered something that is not a value."""


def make_undumpable():
    """No process of this user may ptrace this one or open its memory (Linux's prctl)."""
    if not sys.platform.startswith("linux"):
        return  # elsewhere a same-user child is kept out by the platform's own rules, or not at all
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


class Worker:
    """The child process that runs the repository's code, and the proxies of its objects."""

    def __init__(self, repo):
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-B", str(HERE / "repo_worker.py")], cwd=repo,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stdout.fileno(), start_new_session=True,
        )
        self.dead = None  # why the child can no longer answer
        self.remotes = {}  # handle -> the one proxy (or exception class) for it

    def request(self, *message):
        if self.dead is not None:
            raise RepositoryError(self.dead)
        try:
            self.process.stdin.write(wire.dumps(message))
            self.process.stdin.flush()
            reply = wire.loads(self.process.stdout.readline(wire.MAX_LINE + 1))
        except (OSError, wire.Garbage) as error:
            self.stop(f"the repository's process stopped answering ({error}); exit status {self.process.poll()}")
            raise RepositoryError(self.dead) from None
        try:
            if reply[0] == "value" and len(reply) == 2:
                return wire.decode(reply[1], self.remote)
            if reply[0] == "raise" and len(reply) == 3 and type(reply[2]) is str:
                error_class = wire.decode(reply[1], self.remote)
                if isinstance(error_class, type) and issubclass(error_class, BaseException):
                    raise error_class(reply[2])
            raise wire.Garbage(f"no reply is tagged {reply[0]!r}")
        except wire.Garbage as error:
            self.stop(f"the repository's process answered something that is not a value: {error}")
            raise RepositoryError(self.dead) from None

    def remote(self, data):
        """The proxy of the child's object `data` ("obj", handle, kind, name, base)."""
        if data[0] != "obj" or len(data) != 5 or type(data[1]) is not int:
            raise wire.Garbage(f"not an object: {str(data)[:80]}")
        _, handle, _kind, name, base = data
        if handle not in self.remotes:
            self.remotes[handle] = self._exception_class(handle, name, base) if base is not None else Remote(self, handle, name)
        return self.remotes[handle]

    def _exception_class(self, handle, name, base):
        builtin = getattr(builtins, base, None) if type(base) is str else None
        if not (isinstance(builtin, type) and issubclass(builtin, BaseException)):
            raise wire.Garbage(f"{base!r} is no builtin exception")
        if not issubclass(builtin, Exception):  # SystemExit, KeyboardInterrupt...: never let it end the run
            builtin = RepositoryError
        elif name == base:
            return builtin
        return type(str(name), (builtin,), {"__module__": "repository", "corral_handle": handle})

    def encode(self, value):
        """A value of the tests' for a call: plain values and the child's own objects only."""
        def other(item):
            handle = getattr(item, "corral_handle", None)
            if isinstance(item, Remote) or (isinstance(item, type) and type(handle) is int):
                return ("ref", object.__getattribute__(item, "corral_handle"))
            raise TypeError(f"a {type(item).__name__} cannot be passed to the repository's code")
        return wire.encode(value, other)

    def stop(self, why):
        if self.dead is None:
            self.dead = why
        try:
            os.killpg(self.process.pid, 9)
        except OSError:
            pass
        self.process.wait()


class Remote:
    """An object of the child's: a module, class, function or instance of the repository."""

    def __init__(self, worker, handle, name):
        object.__setattr__(self, "corral_worker", worker)
        object.__setattr__(self, "corral_handle", handle)
        object.__setattr__(self, "corral_name", name)

    def _ask(self, *message):
        return object.__getattribute__(self, "corral_worker").request(*message)

    def __getattr__(self, name):
        return self._ask("getattr", object.__getattribute__(self, "corral_handle"), name)

    def __call__(self, *args, **kwargs):
        worker = object.__getattribute__(self, "corral_worker")
        return self._ask("call", object.__getattribute__(self, "corral_handle"), worker.encode(args), worker.encode(kwargs))

    def _op(self, op, *args):
        worker = object.__getattribute__(self, "corral_worker")
        return self._ask("op", object.__getattribute__(self, "corral_handle"), op, worker.encode(args))

    def __len__(self):
        return self._op("len")

    def __bool__(self):
        return self._op("bool") is True

    def __iter__(self):
        return iter(self._op("list"))

    def __getitem__(self, key):
        return self._op("getitem", key)

    def __contains__(self, item):
        return self._op("contains", item) is True

    def __repr__(self):
        return f"<{object.__getattribute__(self, 'corral_name')} of the repository>"


class RepositoryFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports that nothing else here can (never a standard library name) with the
    child's modules."""

    def __init__(self, worker):
        self.worker = worker

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in sys.stdlib_module_names:
            return None
        try:
            module = self.worker.request("import", name)
        except ModuleNotFoundError:
            return None
        if not isinstance(module, Remote):
            raise ImportError(f"the repository's {name} is not a module")  # noqa: TRY004 - what an import raises
        spec = importlib.util.spec_from_loader(name, self, origin=f"<repository>/{name}", is_package=True)
        spec.loader_state = module
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        remote = module.__spec__.loader_state
        module.__getattr__ = lambda name: getattr(remote, name)


def run(repo):
    make_undumpable()
    worker = Worker(repo)
    sys.meta_path.append(RepositoryFinder(worker))
    try:
        suite = unittest.TestSuite()
        for path in sorted(HERE.glob("test_*.py")):
            spec = importlib.util.spec_from_file_location(f"hidden_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
        result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    finally:
        worker.stop("the tests are over")
    return result.wasSuccessful() and result.testsRun > 0 and not result.skipped


if __name__ == "__main__":
    repository = os.getcwd()
    os.chdir(HERE)
    try:
        passed = run(repository)
    except BaseException:  # noqa: BLE001 - tests that cannot even load fail the run
        traceback.print_exc(file=sys.stdout)
        passed = False
    sys.stdout.flush()
    os._exit(0 if passed else 1)
