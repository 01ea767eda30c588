"""gRPC Brain service: validates the request, then streams the agent's events."""

from __future__ import annotations

import asyncio
import logging

import grpc
import redis.asyncio as aioredis

from services.brain.agent import Agent
from services.brain.config import BrainSettings
from services.brain.llm import OpenAIChatClient
from services.brain.session_store import SessionStore
from voicebot.common.grpc_server import serve_forever
from voicebot.common.logs import setup_logging
from voicebot.v1 import brain_pb2, brain_pb2_grpc

log = logging.getLogger("brain")
MAX_TEXT_CHARS = 2000


def validate(request: brain_pb2.RespondRequest) -> str | None:
    for name in ("session_id", "turn_id", "user_id"):
        if not getattr(request, name):
            return f"{name} is required"
    if not request.text.strip():
        return "text is empty"
    if len(request.text) > MAX_TEXT_CHARS:
        return f"text is over {MAX_TEXT_CHARS} characters"
    return None


class BrainServicer(brain_pb2_grpc.BrainServicer):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def Respond(self, request: brain_pb2.RespondRequest, context: grpc.aio.ServicerContext):
        problem = validate(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        async for event in self.agent.respond(request):
            yield event


def build_agent(settings: BrainSettings) -> tuple[Agent, OpenAIChatClient, aioredis.Redis]:
    chat = OpenAIChatClient(
        settings.llm_base_url, settings.llm_model, settings.llm_api_key,
        settings.llm_max_tokens, settings.llm_temperature,
        settings.llm_deadline_s, settings.llm_first_token_timeout_s,
    )
    redis = aioredis.Redis.from_url(settings.redis_url)
    return Agent(settings, chat, SessionStore(redis, settings.session_ttl_s)), chat, redis


async def run(settings: BrainSettings) -> None:
    agent, chat, redis = build_agent(settings)
    await redis.ping()  # fail at start, not at the first turn, when Redis is missing

    def register(server: grpc.aio.Server) -> list[str]:
        brain_pb2_grpc.add_BrainServicer_to_server(BrainServicer(agent), server)
        return [brain_pb2.DESCRIPTOR.services_by_name["Brain"].full_name]

    async def on_stop() -> None:
        await chat.aclose()
        await redis.aclose()

    await serve_forever("brain", settings, register, on_stop)


def main() -> None:
    settings = BrainSettings()
    setup_logging("brain", settings.log_level, settings.log_json)
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()
