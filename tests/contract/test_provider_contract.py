"""What every sandbox provider promises, whatever its kind: the same tests on each.

A provider starts an env that answers over its stream, reports a crash with what the env said,
ends a line too long to read, runs a verifier's command on files it was given (within a
deadline, its output bounded), enforces its limits where it is isolated, leaves nothing once
closed, claims its instance and removes what a killed run of it left, keeps warm sandboxes,
and keeps many sandboxes apart at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import pytest

from corral.env import jsonrpc
from corral.errors import ConfigError, SandboxError
from corral.sandboxes import Resources, Sandbox, SandboxProvider
from tests.contract.conftest import ALL, ISOLATED, RUNS_COMMANDS
from tests.contract.providers import SPEC, unique_instance

pytestmark = pytest.mark.timeout(600)
LINE_LIMIT_MB = 64  # every provider's: one protocol line may carry a large tool result
each_provider = pytest.mark.parametrize("under_test", ALL, indirect=True)


async def call(sandbox: Sandbox, method: str, params: dict | None = None, request_id: str = "1") -> dict:
    """One JSON-RPC request over the sandbox's stream, and its reply."""
    await sandbox.send_line(jsonrpc.encode(jsonrpc.request(request_id, method, params)))
    while True:
        reply = jsonrpc.decode(await sandbox.read_line())
        if reply.get("id") == request_id:
            return reply


async def tool(sandbox: Sandbox, name: str, request_id: str = "1", **arguments) -> str:
    reply = await call(sandbox, "tools/call", {"name": name, "arguments": arguments}, request_id)
    return reply["result"]["content"][0]["text"]


@contextlib.asynccontextmanager
async def provided(under_test, **options) -> AsyncIterator[SandboxProvider]:
    provider = under_test.make(**options)
    try:
        await provider.prepare(SPEC)
        yield provider
    finally:
        await provider.aclose()


async def until(condition, timeout_s: float = 120.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.05)


@each_provider
def test_a_started_env_answers_over_its_stream_and_counts_as_live_until_closed(under_test):
    async def check() -> None:
        async with provided(under_test) as provider:
            sandbox = await provider.start(SPEC, {"corral.session": "s1", "corral.episode": "e1"})
            assert provider.status().live == 1 and sandbox.alive
            initialized = await call(sandbox, "initialize", {"protocolVersion": jsonrpc.PROTOCOL_VERSION})
            assert initialized["result"]["serverInfo"]["name"] == "Contract"
            listed = await call(sandbox, "tools/list")
            assert {t["name"] for t in listed["result"]["tools"]} == {"echo", "flood", "crash", "hog"}
            assert await tool(sandbox, "echo", text="héllo\nworld") == "héllo\nworld"
            await sandbox.close()
            await sandbox.close()  # twice is fine
            assert provider.status().live == 0 and not sandbox.alive
        assert await under_test.leftovers(provider.instance) == []

    asyncio.run(check())


@each_provider
def test_an_env_that_dies_ends_its_stream_and_leaves_its_last_words(under_test):
    async def check() -> None:
        async with provided(under_test) as provider:
            sandbox = await provider.start(SPEC)
            await sandbox.send_line(jsonrpc.encode(jsonrpc.request("1", "tools/call", {"name": "crash"})))
            with pytest.raises(EOFError):
                await sandbox.read_line()
            await until(lambda: "dying on purpose" in sandbox.stderr_tail(), timeout_s=30)
            await until(lambda: not sandbox.alive, timeout_s=30)
            with pytest.raises(EOFError):  # and so does every read after
                await sandbox.read_line()
            with pytest.raises(EOFError):  # and every line sent to it
                await sandbox.send_line(jsonrpc.encode(jsonrpc.request("2", "tools/list")))
            await sandbox.close()

    asyncio.run(check())


@each_provider
def test_a_line_longer_than_the_limit_ends_the_stream_instead_of_filling_the_server(under_test):
    async def check() -> None:
        async with provided(under_test) as provider:
            sandbox = await provider.start(SPEC)
            assert len(await tool(sandbox, "flood", megabytes=1)) == 2**20  # a large answer is fine
            flood = {"name": "flood", "arguments": {"megabytes": LINE_LIMIT_MB + 1}}
            await sandbox.send_line(jsonrpc.encode(jsonrpc.request("2", "tools/call", flood)))
            with pytest.raises(EOFError, match=rf"more than {LINE_LIMIT_MB} MB .*without a newline"):
                async with asyncio.timeout(120):
                    await sandbox.read_line()
            await sandbox.close()

    asyncio.run(check())


@pytest.mark.parametrize("under_test", RUNS_COMMANDS, indirect=True)
def test_a_verifier_command_reads_the_files_it_was_given_and_cannot_change_them(under_test):
    script = (
        'cat "$1/answer.txt"; { echo changed > "$1/answer.txt"; } 2>/dev/null || echo "cannot change it"; '
        "echo to-stderr >&2; exit 3"
    )

    async def check() -> None:
        async with provided(under_test) as provider:
            sandbox = await provider.start(SPEC)
            result = await sandbox.verify(
                {"answer.txt": b"forty-two\n", "check.sh": script.encode()},
                lambda folder: ["sh", f"{folder}/check.sh", folder],
                timeout_s=60,
            )
            assert result.exit_code == 3
            assert sorted(result.output.split()) == sorted(["forty-two", "cannot", "change", "it", "to-stderr"])
            await sandbox.close()

    asyncio.run(check())


@pytest.mark.parametrize("under_test", RUNS_COMMANDS, indirect=True)
def test_a_verifier_command_is_held_to_its_deadline_and_its_output_to_its_bound(under_test):
    async def check() -> None:
        async with provided(under_test) as provider:
            sandbox = await provider.start(SPEC)
            slow = await sandbox.verify({}, lambda folder: ["sh", "-c", "echo started; sleep 60"], timeout_s=2)
            assert (slow.exit_code, slow.output) == (None, "started\n")
            loud = await sandbox.verify(
                {}, lambda folder: ["sh", "-c", "yes | head -c 300000; echo END"], timeout_s=60, max_output_chars=1000
            )
            assert loud.exit_code == 0 and len(loud.output) == 1000 and loud.output.endswith("y\nEND\n")
            await sandbox.close()

    asyncio.run(check())


@pytest.mark.parametrize("under_test", ISOLATED, indirect=True)
def test_an_isolated_provider_kills_an_env_past_its_memory_limit(under_test):
    spec = dataclasses.replace(SPEC, resources=Resources(cpus=0.5, memory_mb=64, pids=64))

    async def check() -> None:
        async with provided(under_test) as provider:
            await provider.prepare(spec)
            sandbox = await provider.start(spec)
            assert await tool(sandbox, "hog", megabytes=8) == "held 8 MB"
            await sandbox.send_line(
                jsonrpc.encode(jsonrpc.request("2", "tools/call", {"name": "hog", "arguments": {"megabytes": 512}}))
            )
            with pytest.raises(EOFError):
                await sandbox.read_line()
            await sandbox.close()

    asyncio.run(check())


@each_provider
def test_a_provider_claims_its_instance_and_its_restart_removes_what_a_killed_run_left(under_test):
    instance = unique_instance()

    async def check() -> None:
        killed = under_test.make(instance=instance)
        await killed.reap_leftovers()
        left = await killed.start(SPEC)
        assert await tool(left, "echo", text="still here") == "still here"

        rival = under_test.make(instance=instance)  # a second live server of the same name
        with pytest.raises(ConfigError, match=f"another corral server holds the instance '{instance}'"):
            await rival.reap_leftovers()
        await rival.aclose()
        assert await tool(left, "echo", text="untouched") == "untouched"

        await under_test.kill(killed)
        assert await under_test.leftovers(instance) != []
        restarted = under_test.make(instance=instance)
        try:
            await restarted.reap_leftovers()
            assert await under_test.leftovers(instance) == []
        finally:
            await restarted.aclose()
            await killed.aclose()  # only this process's handles are left to let go of
        assert await under_test.leftovers(instance) == []

    asyncio.run(check())


@each_provider
def test_a_warm_pool_hands_out_started_envs_and_refills(under_test):
    async def check() -> None:
        async with provided(under_test, warm_pool=1) as provider:
            provider.start_pools([SPEC])
            await until(lambda: provider.status().warm.get("contract") == 1)
            assert provider.status().live == 0
            sandbox = await provider.start(SPEC, {"corral.session": "s1", "corral.episode": "e1"})
            assert provider.status().warm["contract"] == 0 and provider.status().live == 1  # it was the warm one
            assert await tool(sandbox, "echo", text="warm") == "warm"
            await until(lambda: provider.status().warm.get("contract") == 1)
            await sandbox.close()
            assert provider.status().live == 0
        assert await under_test.leftovers(provider.instance) == []

    asyncio.run(check())


@each_provider
def test_requests_sent_together_are_each_answered_whole(under_test):
    # The replies come back to back, several in one read: each line must be cut exactly.
    async def check() -> None:
        async with provided(under_test) as provider:
            sandbox = await provider.start(SPEC)
            for number in range(20):
                echo = {"name": "echo", "arguments": {"text": f"reply {number}"}}
                await sandbox.send_line(jsonrpc.encode(jsonrpc.request(str(number), "tools/call", echo)))
            replies = [jsonrpc.decode(await sandbox.read_line()) for _ in range(20)]
            answers = {reply["id"]: reply["result"]["content"][0]["text"] for reply in replies}
            assert answers == {str(number): f"reply {number}" for number in range(20)}
            await sandbox.close()

    asyncio.run(check())


@each_provider
def test_many_sandboxes_at_once_each_answer_their_own_calls(under_test):
    count = 8

    async def check() -> None:
        async with provided(under_test) as provider:
            sandboxes = await asyncio.gather(*(provider.start(SPEC) for _ in range(count)))
            assert provider.status().live == count

            async def chat(index: int, sandbox: Sandbox) -> list[str]:
                return [await tool(sandbox, "echo", f"{index}-{turn}", text=f"{index}-{turn}") for turn in range(20)]

            answers = await asyncio.gather(*(chat(i, s) for i, s in enumerate(sandboxes)))
            assert answers == [[f"{i}-{turn}" for turn in range(20)] for i in range(count)]
            await asyncio.gather(*(sandbox.close() for sandbox in sandboxes))
            assert provider.status().live == 0
        assert await under_test.leftovers(provider.instance) == []

    asyncio.run(check())


@each_provider
def test_a_provider_copies_a_sandbox_into_another_of_its_own_or_refuses_naming_the_fix(under_test):
    async def check() -> None:
        async with provided(under_test) as provider:
            source, target = await asyncio.gather(provider.start(SPEC), provider.start(SPEC))
            try:
                if provider.copies:
                    await source.copy_to(target)  # a fork = "copy" (tests/integration/test_fork_copy.py)
                    assert await tool(target, "echo", text="after") == "after"
                else:
                    with pytest.raises(SandboxError, match="--sandbox local or docker"):
                        await source.copy_to(target)
            finally:
                await asyncio.gather(source.close(), target.close())
        assert await under_test.leftovers(provider.instance) == []
        assert provider.copies == (under_test.kind in ("local", "docker"))

    asyncio.run(check())
