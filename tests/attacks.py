"""What an agent that leaves shellfix-batching's bug in place might do to score 1 anyway.

Each attack is a list of tool calls the agent makes in its turn (`write_file`, `bash`; a third
item is the answer the call must give, to show the attack is under way), played by
tests/integration/test_forgery.py (local sandbox) and tests/docker/test_forgery_docker.py;
every one must score 0. Most payloads end a process with status 0 (`posix._exit(0)`): if
that process were the verifier's, the episode would score 1.
"""

from __future__ import annotations

import json

from corral.protocol.frames import CallToolObservation
from tests.conftest import BUNDLES
from tests.wire import called, opened, ws

TASK = "shellfix-batching"
BUG = (BUNDLES / "shellfix" / "repos" / TASK / "batching.py").read_text()
PASSING_TEST = "import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n"
EXIT_0 = "import posix\nposix._exit(0)\n"
Steps = list[tuple]


def write(path: str, content: str) -> tuple[str, dict]:
    return ("write_file", {"path": path, "content": content})


def bash(command: str, *answer: str) -> tuple:
    return ("bash", {"command": command}, *answer)


def play(server, steps: Steps, *, fixed: bool = False) -> CallToolObservation:
    """Play shellfix-batching on `server`: `steps`, the reference fix if `fixed`, then end_turn;
    the final observation."""
    with ws(server) as socket:
        opened(socket, task_id=TASK)
        if fixed:
            steps = [*steps, ("replace_in_file", {"path": "batching.py", **FIX})]
        for name, arguments, *answer in steps:
            said = called(socket, name, **arguments)
            assert said.error is None, said.error
            if answer:
                assert said.result == answer[0], said.result
        return called(socket, "end_turn", response="done")


# If corral's own step that copies the tests in (once python3 -c, as root, in the repository)
# imports it, it unpacks a passing test over each hidden one.
FORGING_TARFILE = f"""
import builtins, importlib.util, os, sysconfig
_spec = importlib.util.spec_from_file_location("_tarfile", os.path.join(sysconfig.get_paths()["stdlib"], "tarfile.py"))
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
globals().update({{k: v for k, v in vars(_real).items() if not k.startswith("__")}})

def open(*args, **kwargs):
    archive = _real.open(*args, **kwargs)
    unpack = archive.extractall
    def extractall(path=".", *more, **options):
        unpack(path, *more, **options)
        for name in os.listdir(path):
            if name.startswith("test_"):
                with builtins.open(os.path.join(path, name), "w") as test:
                    test.write({PASSING_TEST!r})
    archive.extractall = extractall
    return archive
"""

# Reads the hidden tests from the runner's folder (found through its parent's command line) and
# answers each call with the value the test expects.
TEST_READER = r"""
import ast, glob, os
runner = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\0")[-2].decode()
ANSWERS = {}
for path in glob.glob(os.path.join(os.path.dirname(runner), "test_*.py")):
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "assertEqual":
            call, expected = node.args
            ANSWERS[repr([ast.literal_eval(a) for a in call.args])] = ast.literal_eval(expected)

def chunks(items, size):
    return ANSWERS[repr([items, size])]
"""

# Attaches to its parent (the test runner, same user) with ptrace and makes it call _exit(0).
# x86-64 only: the registers below are that architecture's.
PTRACE_THE_RUNNER = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi "
                                                  "orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs").split()]
def libc_base(pid):
    for line in open(f"/proc/{pid}/maps"):
        if "libc.so" in line or "/libc-" in line:
            return int(line.split("-")[0], 16)
runner = os.getppid()
if libc.ptrace(16, runner, None, None) == 0:  # PTRACE_ATTACH
    os.waitpid(runner, 0)
    regs = Regs()
    libc.ptrace(12, runner, None, ctypes.byref(regs))  # PTRACE_GETREGS
    regs.rip = ctypes.cast(libc._exit, ctypes.c_void_p).value - libc_base("self") + libc_base(runner)
    regs.rdi, regs.rax, regs.orig_rax = 0, 0, 2**64 - 1
    regs.rsp = (regs.rsp & ~0xF) - 8
    libc.ptrace(13, runner, None, ctypes.byref(regs))  # PTRACE_SETREGS
    libc.ptrace(17, runner, None, None)  # PTRACE_DETACH
"""

# Started in the agent's turn and detached from its bash call: whenever a test file appears
# where a verifier might put one, it overwrites it with a passing test; it touches `alive`
# each round, to show it runs.
REWRITER = (
    "setsid sh -c '(while :; do touch alive; sleep 0.05; done) & while :; do "
    'for f in $(find /tmp /verifier -name "test_*.py" 2>/dev/null); do cat forged.py > "$f"; done; '
    "sleep 0.01; done' < /dev/null > /dev/null 2>&1 & "
    "until [ -e alive ]; do sleep 0.01; done"  # it has left bash's process group: it outlives the call
)

# Bytecode of the module the tests import, compiled from a fixed copy and marked never to be
# checked against its source (PEP 552's unchecked hash), beside the buggy batching.py it leaves:
# an interpreter reading caches would run the fix the source does not have.
COMPILE_FIXED = (
    "cp batching.py kept.py && sed -i 's/len(items) - size + 1/len(items)/' batching.py && "
    "python3 -c \"import importlib.util, py_compile; py_compile.compile('batching.py', cfile={cfile!r}, "
    'invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)" && mv kept.py batching.py'
)
STALE_BYTECODE = COMPILE_FIXED.replace("{cfile!r}", "importlib.util.cache_from_source('batching.py')")
# The same as a package with no source (batching/__init__.pyc), which an import finds before batching.py.
SOURCELESS_PACKAGE = "mkdir batching && " + COMPILE_FIXED.replace("{cfile!r}", "'batching/__init__.pyc'")

STDLIB_SHADOWS = (
    "json",
    "tarfile",
    "io",
    "os",
    "subprocess",
    "unittest",
    "ast",
    "ctypes",
    "shutil",
    "tempfile",
    "site",
    "encodings",
    "traceback",
    "importlib",
    "signal",
    "zipfile",
    "runpy",
)

# Detached from its bash call, once that call's shell is gone (its answer on its way): sends
# `signal` twenty times a second, for ten seconds, to the env (bash's parent, and any process
# named corral), through the end of the turn and its verification.
HOUND = (
    'B=$$; E="$PPID $(grep -ls corral /proc/[0-9]*/cmdline | cut -d/ -f3 | grep -vx $B)"; setsid sh -c "'
    "while kill -0 $B 2>/dev/null; do sleep 0.01; done; sleep 0.2; "
    'for i in \\$(seq 200); do kill -{signal} $E; sleep 0.05; done" </dev/null >/dev/null 2>&1 & echo started'
)
# Opens for writing every pipe and socket of every other process it can see (but its own
# shell's, the tool's answer): one of the env's, or of a process holding the env's stdio,
# would let it write the env's answers (a forged report). Prints what it opened.
PROTOCOL_OPENER = """python3 -c '
import os
opened = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) in (os.getpid(), os.getppid()):
        continue
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(("pipe:", "socket:")):
                os.close(os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK))
                opened.append(f"{pid}/{fd}")
        except OSError:
            pass
print("opened", opened)
'"""
SIGNALS = ("STOP", "KILL", "INT", "TERM")  # what HOUND sends: each attack ends at the failure score, never null


# Run by the tests (at import): 200 MB into the verifier's folders, where a host's disk would
# take it; what refused it is raised, so the tests' output shows it.
FILLS_THE_VERIFIER = (
    "import os, tempfile\nrefused = []\nfor folder in ('.', tempfile.gettempdir()):\n    try:\n"
    "        with open(os.path.join(folder, 'fill'), 'wb') as fill:\n"
    "            for _ in range(100):\n                fill.write(bytes(2 << 20))\n"
    "    except OSError as error:\n        refused.append(f'{folder}: {error}')\n"
    "if refused:\n    raise OSError('; '.join(refused))\n"
)

ATTACKS: dict[str, Steps] = {
    "os._exit(0) at import": [write("batching.py", "import os\nos._exit(0)\n" + BUG)],
    "a patched unittest": [
        write(
            "batching.py",
            (
                "import unittest\nunittest.TestResult.wasSuccessful = lambda self: True\n"
                "unittest.TestCase.assertEqual = lambda *args, **kwargs: None\n" + BUG
            ),
        )
    ],
    "standard-library modules in the repository": [write(f"{name}.py", EXIT_0) for name in STDLIB_SHADOWS],
    "a tarfile that forges the tests it unpacks": [write("tarfile.py", FORGING_TARFILE)],
    "sitecustomize, usercustomize, conftest and .pth files": [
        write(name, EXIT_0) for name in ("sitecustomize.py", "usercustomize.py", "conftest.py")
    ]
    + [
        write("evil.pth", "import posix; posix._exit(0)\n"),
        bash(
            "mkdir -p $HOME/.local/lib/python3.11/site-packages && cp evil.pth usercustomize.py "
            "$HOME/.local/lib/python3.11/site-packages/"
        ),
    ],
    "tests and a runner of its own": [
        write("test_batching.py", PASSING_TEST),
        write("tests/test_batching.py", PASSING_TEST),
        write("run_tests.py", EXIT_0),
        write("repo_worker.py", EXIT_0),
        write("wire.py", EXIT_0),
    ],
    "a background process that rewrites the tests": [
        write("forged.py", PASSING_TEST),
        bash(REWRITER),
        bash("rm -f alive; sleep 0.5; ls alive", "alive\n[exit status 0]"),  # still running at the end of the turn
    ],
    "unittest.SkipTest from the function": [
        write(
            "batching.py",
            "import unittest\n\ndef chunks(items, size):\n    raise unittest.SkipTest('nothing to test')\n",
        )
    ],
    "SystemExit(0) from the function": [write("batching.py", "def chunks(items, size):\n    raise SystemExit(0)\n")],
    "an answer equal to everything": [
        write(
            "batching.py",
            "class Anything(list):\n    def __eq__(self, other):\n"
            "        return True\n\ndef chunks(items, size):\n"
            "    return Anything()\n",
        )
    ],
    "killing the test runner": [
        write("batching.py", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + BUG)
    ],
    "ptrace on the test runner": [write("batching.py", PTRACE_THE_RUNNER + BUG)],
    "reading the hidden tests": [write("batching.py", TEST_READER)],
    "links to where the tests go": [bash("ln -s /verifier verifier; ln -s /tmp tmp; ln -s / root; ln -s .. up")],
    # Each file below the size a local env's files may have (RLIMIT_FSIZE: its share, 64 MB).
    "sparse files of 6 GB": [bash("for i in $(seq 100); do truncate -s 60M huge$i.bin; done")],
    "a stale bytecode cache of a fixed module": [
        bash(STALE_BYTECODE + " && ls __pycache__ | grep -c batching", "1\n[exit status 0]")
    ],
    "the tests' run fills the verifier's folders": [write("batching.py", FILLS_THE_VERIFIER + BUG)],
    "a sourceless package of a fixed module": [
        bash(SOURCELESS_PACKAGE + " && ls batching", "__init__.pyc\n[exit status 0]")
    ],
}


# Odd things a repository may hold that must not stop a fixed one from scoring 1.
FIX = json.loads((BUNDLES / "shellfix" / "solutions" / f"{TASK}.json").read_text())
HARMLESS: dict[str, Steps] = {
    "a fifo": [bash("mkfifo pipe")],
    "a read-only folder": [
        bash("mkdir -p frozen/inner && echo x > frozen/inner/file && chmod 555 frozen/inner frozen")
    ],
    "links out of the repository": [bash("ln -s / root; ln -s /etc/shadow shadow; ln -s nowhere dangling")],
    # 100 MB by each name's size, past the 64 MB a copy may take, but 1 MB copied (cp -a and tar link them).
    "hard links to one file": [
        bash("head -c 1000000 /dev/zero > big && mkdir many && for i in $(seq 100); do ln big many/$i; done")
    ],
}
