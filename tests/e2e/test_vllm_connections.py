"""`VLLMGenerator`'s connections to a server that closes idle ones, as vLLM's does after 5 s: it
lets a pooled connection go before the server would close it, and a request the server dropped
before answering is sent again, once, on a fresh connection (its seed makes it the same sample)."""

from __future__ import annotations

import os
import time

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

from corral.training.generation import SamplingParams, VLLMGenerator
from tests.e2e.vllm_standin import serve_standin
from tests.proxies import loopback_proxy

pytestmark = pytest.mark.trl


def says_hello(context: str) -> str:
    return "hello"


def test_a_request_the_server_drops_before_answering_is_sent_again(tokenizer) -> None:
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    with (
        serve_standin(None, tokenizer, served_name="scripted", policy=says_hello) as url,
        loopback_proxy(url, drop_reused=True) as proxied,
    ):
        generator = VLLMGenerator(proxied, sampling=SamplingParams())
        first = generator.generate([1, 2, 3], max_new_tokens=8, stop_token_ids=[end])
        # The connection is reused, and dropped under this request: it goes again on a new one.
        second = generator.generate([1, 2, 3], max_new_tokens=8, stop_token_ids=[end])
        generator.close()

    expected = [*tokenizer.encode("hello", add_special_tokens=False), end]
    assert first.token_ids == second.token_ids == expected and second.stopped


def test_a_connection_idle_for_most_of_the_servers_keep_alive_is_not_reused(tokenizer) -> None:
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    peers: list[int] = []
    with serve_standin(None, tokenizer, served_name="scripted", policy=says_hello, keep_alive_s=5, peers=peers) as url:
        generator = VLLMGenerator(url, sampling=SamplingParams())
        for pause_s in (0, 0, 3):  # 3 s idle: past the generator's pool expiry, short of the server's 5 s
            time.sleep(pause_s)
            generator.generate([1, 2, 3], max_new_tokens=8, stop_token_ids=[end])
        generator.close()

    assert peers[0] == peers[1] != peers[2]  # pooled while fresh, a new connection once it may be stale
