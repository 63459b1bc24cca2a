"""What an agent's commands might do to the env that serves them: signal, trace or open it, write
its files, take its user back. Each must fail, in docker (tests/docker/test_agent_identity.py) and
in the local sandbox with three uids (tests/integration/test_local_identities.py); both play the
probe env (tests/fixtures/dockerbox/envs/probe), PID 1 of its sandbox."""

from __future__ import annotations

import json

KEPT = "/tmp/kept-by-the-env"  # the probe env's own file
ENV_UID = "$(awk '/^Uid:/ {print $2}' /proc/1/status)"
PTRACE_ATTACH = "import ctypes, sys; sys.exit(ctypes.CDLL(None).ptrace(16, 1, 0, 0))"  # PTRACE_ATTACH: 0 when it took
ATTACKS_ON_THE_ENV = {
    "an interrupt": "kill -INT 1",
    "a stop": "kill -STOP 1",
    "its environment": "cat /proc/1/environ",
    "its descriptors": "ls /proc/1/fd",
    "its memory": "python3 -c \"open('/proc/1/mem', 'rb')\"",
    "a trace": f"python3 -c '{PTRACE_ATTACH}'",
    "its file": f"echo forged > {KEPT}",
    "its file, replaced": f"rm -f {KEPT}",
    "its user, taken back": f'u={ENV_UID}; python3 -c "import os; os.setresuid($u, $u, $u)"',
    "root's group": "python3 -c 'import os; os.setresgid(0, 0, 0)'",
}


def config_planted_in_the_env_s_home(environment) -> tuple[str, list[str]]:
    """The env's HOME (its own word, from the probe's `inspect`), and what the agent's shell
    answered writing a git config there (whose `core.fsmonitor` a git the env ran would run),
    then one in its own HOME: the exit status of each."""
    home = json.loads(environment.inspect())["home"]
    answer = environment.shell(command=f'touch "{home}/.gitconfig"; echo $?; touch "$HOME/.gitconfig"; echo $?')
    return home, answer.split("\n")[-3:-1]
