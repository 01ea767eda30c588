"""The benchmarks' scripted LLM server (tests/fakes/llm_server.py) through the brain's real
HTTP client: a stream of word deltas, the guard's verdict, keep-alive, the liveness probe."""

from __future__ import annotations

import asyncio

import httpx

from tests.fakes import llm_server
from voicebot.brain.llm import OpenAIChatClient, parse_sse_line


async def _serve() -> tuple[asyncio.Server, str]:
    server = await asyncio.get_running_loop().create_server(llm_server.ScriptedLLM, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


async def test_the_reply_streams_word_by_word_and_the_guard_allows():
    server, url = await _serve()
    client = OpenAIChatClient(url, "fake")
    body = {"model": "fake", "stream": True, "messages": [{"role": "system", "content": "You are a bot."},
                                                          {"role": "user", "content": "a table please"}]}
    try:
        async with httpx.AsyncClient() as http:  # the events as sent (the brain's client merges them)
            for _ in range(2):  # the second request on the kept-alive connection
                async with http.stream("POST", url + "/chat/completions", json=body) as resp:
                    chunks = [c async for line in resp.aiter_lines() if (c := parse_sse_line(line))]
                texts = [c.text for c in chunks if c.text]
                assert "".join(texts) == llm_server.REPLY
                assert len(texts) == len(llm_server.REPLY.split())
                assert chunks[-1].usage == {"prompt_tokens": 10, "completion_tokens": len(texts)}
        for _ in range(2):  # through the brain's client, on its kept-alive connection
            reply = [c async for c in client(body["messages"])]
            assert "".join(c.text for c in reply) == llm_server.REPLY
            words = len(llm_server.REPLY.split())
            assert reply[-1].usage == {"prompt_tokens": 10, "completion_tokens": words}
        guard = [c.text async for c in client([{"role": "system", "content": "You screen calls for x."},
                                               {"role": "user", "content": "hi"}])]
        assert "".join(guard) == "ALLOW"
    finally:
        await client.aclose()
        server.close()


async def test_health_answers_and_unknown_paths_are_not_found():
    server, url = await _serve()
    try:
        async with httpx.AsyncClient() as http:
            assert (await http.get(url.removesuffix("/v1") + "/health")).status_code == 200
            assert (await http.get(url + "/models")).json()["data"][0]["id"] == "fake"
            assert (await http.post(url + "/embeddings", json={})).status_code == 404
    finally:
        server.close()
