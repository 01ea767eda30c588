"""The gateway's ASGI app: WebSockets /v1/call, /v1/realtime (OpenAI), /v1/twilio; page, health, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from functools import partial
from html import escape
from importlib.resources import files

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketState

from voicebot.common import gc_tuning
from voicebot.common.internal_auth import InternalAuthError, internal_token
from voicebot.common.logs import setup_logging
from voicebot.common.redis import connect_redis
from voicebot.common.telemetry import setup_tracing, shutdown_tracing
from voicebot.gateway import serving
from voicebot.gateway.admission import Unauthenticated, UserSessions
from voicebot.gateway.auth import TokenAuth
from voicebot.gateway.capacity import Capacity, CpuUse, LoopLag
from voicebot.gateway.codec_realtime import RealtimeCodec
from voicebot.gateway.codec_twilio import (
    BAD_INPUT_LOGS,
    MESSAGES_BEFORE_START,
    TwilioCodec,
    admits,
    secret_ok,
    twilio_enabled,
)
from voicebot.gateway.codec_v1 import V1Codec
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.conversation import Conversation
from voicebot.gateway.fallback import FallbackVoice
from voicebot.gateway.metrics import ADMISSION_REFUSALS
from voicebot.gateway.origin import OriginPolicy
from voicebot.gateway.protocol import ProtocolError, error_event
from voicebot.gateway.redis_memory import watch_redis_memory
from voicebot.gateway.sessions import SessionRegistry
from voicebot.gateway.transport import Codec, Transport, read_opening
from voicebot.gateway.upstreams import Upstreams
from voicebot.gateway.ws_direct import DirectFramesProtocol

log = logging.getLogger("gateway")

CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN_ORIGIN = 4403
CLOSE_TRY_AGAIN_LATER = 1013  # RFC 6455 registry: the server is overloaded
CLOSE_POLICY = 1008  # RFC 6455: the endpoint's policy (here: the user's session cap)
STATIC_PACKAGE = ("voicebot.gateway", "static")  # the browser page: index.html, page.css, page.js


def render_page(settings: GatewaySettings) -> str:
    """index.html with the business it speaks for filled in, escaped: the values are settings,
    not markup. One pass, so a value that looks like a placeholder stays text."""
    values = {"agent_name": settings.agent_name or "voicebot",
              "agent_purpose": settings.agent_purpose or "a realtime voice agent"}
    page = (files(STATIC_PACKAGE[0]) / STATIC_PACKAGE[1] / "index.html").read_text()
    return re.sub(r"\{\{(\w+)\}\}", lambda m: escape(values[m[1]]), page)


def create_app(settings: GatewaySettings) -> Starlette:
    auth = TokenAuth(settings.token_map())
    origins = OriginPolicy(settings.allowed_origins)
    lag, cpu = LoopLag(), CpuUse()
    capacity = Capacity(settings.max_sessions, settings.max_loop_lag_ms, lag,
                        max_cores=settings.max_cpu_cores, cpu=cpu)
    # Phone calls all run as one user: they have their own cap (0: the gateway's only).
    users = UserSessions(settings.max_sessions_per_user,
                         {settings.twilio_user_id: settings.twilio_max_calls} if twilio_enabled(settings)
                         else None)
    unauthenticated = Unauthenticated(settings.max_unauthenticated)
    BAD_INPUT_LOGS.configure(settings.bad_message_logs_per_s)
    state: dict = {}
    page = render_page(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        state["upstreams"] = Upstreams(settings.stt_addr, settings.brain_addr, settings.tts_addr)
        state["redis"] = connect_redis(settings.redis_url.get_secret_value())
        state["sessions"] = SessionRegistry(state["redis"], settings.session_ttl_s)
        state["fallback"] = FallbackVoice(state["upstreams"].tts, settings.output_sample_rate)
        state["fallback"].warm("en")  # in the background: TTS may come up after the gateway
        lag_task = asyncio.create_task(lag.run())
        # Sampled only when there is a limit to check it against.
        cpu_task = asyncio.create_task(cpu.run(lambda: capacity.active)) if settings.max_cpu_cores else None
        memory_task = asyncio.create_task(watch_redis_memory(state["redis"], settings.redis_memory_poll_s)) \
            if settings.redis_memory_poll_s > 0 else None
        yield
        lag_task.cancel()
        if memory_task is not None:
            memory_task.cancel()
        if cpu_task is not None:
            cpu_task.cancel()
        await state["fallback"].close()
        await state["upstreams"].close()
        await state["redis"].aclose()
        shutdown_tracing()

    async def refuse(ws: WebSocket, code: int, reason: str, error: tuple[str, str] | None = None) -> None:
        # Accept first so the client sees the close code (and the error), not a bare HTTP 403.
        if ws.application_state == WebSocketState.CONNECTING:
            await ws.accept()
        if error is not None:
            await ws.send_text(error_event(*error))
        await ws.close(code=code, reason=reason)

    async def call_endpoint(ws: WebSocket) -> None:
        await serve(ws, V1Codec(settings), auth.authenticate(ws))

    async def realtime_endpoint(ws: WebSocket) -> None:
        await serve(ws, RealtimeCodec(settings), auth.authenticate(ws))

    async def twilio_endpoint(ws: WebSocket) -> None:
        """Twilio sends no headers of ours: the secret comes in the URL (checked before anything
        else) or as the `start` message's custom parameter, which must come within the deadline;
        until then the socket holds no session slot, and only so many may wait."""
        if not origins.allows(ws.headers.get("origin"), ws.headers.get("host")):
            await refuse(ws, CLOSE_FORBIDDEN_ORIGIN, "origin not allowed")
            return
        user = settings.twilio_user_id if twilio_enabled(settings) else None
        in_url = ws.query_params.get("secret")
        if user is None or in_url is not None:
            await serve(ws, TwilioCodec(settings, in_url), user if secret_ok(in_url, settings) else None)
            return
        if not unauthenticated.enter():
            # Refused in the handshake (HTTP 503), not accepted and closed: a crowd reconnecting
            # as fast as it is refused costs the gateway one HTTP exchange each, not a WebSocket.
            await ws.send_denial_response(PlainTextResponse(
                "too many unauthenticated sockets; try again later", 503, headers={"Retry-After": "1"}))
            return
        try:
            await ws.accept()
            start, why = await read_opening(ws, partial(admits, settings=settings), MESSAGES_BEFORE_START,
                                            settings.twilio_start_timeout_s)
        finally:
            unauthenticated.leave()
        if start is None:
            ADMISSION_REFUSALS.labels(why).inc()
            await refuse(ws, CLOSE_UNAUTHORIZED, "unauthorized")
            return
        await serve(ws, TwilioCodec(settings), user, opening=(start,))

    async def serve(ws: WebSocket, codec: Codec, user_id: str | None,
                    opening: tuple[str, ...] = ()) -> None:
        if not origins.allows(ws.headers.get("origin"), ws.headers.get("host")):
            await refuse(ws, CLOSE_FORBIDDEN_ORIGIN, "origin not allowed")
            return
        if user_id is None:
            ADMISSION_REFUSALS.labels("unauthorized").inc()
            await refuse(ws, CLOSE_UNAUTHORIZED, "unauthorized")
            return
        # The user's own cap first: one caller at it must not take the gateway's last slots.
        if not users.open(user_id):
            await refuse(ws, CLOSE_POLICY, "too many sessions for this user",
                         ("too_many_sessions", "this user holds as many sessions as it may; end one first"))
            return
        try:
            if not capacity.open():
                # A clear refusal beyond capacity, not a slower call for everyone already here.
                await refuse(ws, CLOSE_TRY_AGAIN_LATER, "at capacity",
                             ("overloaded", "this gateway is at capacity; try again shortly"))
                return
            try:
                await run_call(ws, codec, user_id, opening)
            finally:
                capacity.close()
        finally:
            users.close(user_id)

    async def run_call(ws: WebSocket, codec: Codec, user_id: str, opening: tuple[str, ...]) -> None:
        """The conversation, its codec and the socket between them (transport.py)."""
        try:
            if ws.application_state == WebSocketState.CONNECTING:
                await ws.accept()
            transport = Transport(ws, codec)
            conversation = Conversation(transport, user_id, settings, state["upstreams"], state["sessions"],
                                        fallback=state["fallback"], capacity=capacity)
            await transport.serve(conversation, opening)
        except ProtocolError as exc:  # a session the protocol starts itself could not be opened
            with contextlib.suppress(Exception):
                await ws.close(code=CLOSE_TRY_AGAIN_LATER, reason=exc.message[:100])
        except Exception:
            log.exception("call failed")
            with contextlib.suppress(Exception):
                await ws.close(code=1011, reason="internal error")

    async def index(_request: Request) -> HTMLResponse:
        return HTMLResponse(page)

    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> JSONResponse:
        checks = await state["upstreams"].health()
        try:
            checks["redis"] = bool(await asyncio.wait_for(state["redis"].ping(), 1.0))
        except Exception:  # noqa: BLE001 - any failure means "not ready"
            checks["redis"] = False
        checks.update(capacity.checks())  # saturated: send new calls elsewhere
        ready = all(checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    async def metrics(request: Request) -> Response:
        # Exemplars (trace ids on the stage histograms) exist only in OpenMetrics:
        # Prometheus asks for it when exemplar storage is on.
        if "application/openmetrics-text" in request.headers.get("accept", ""):
            return Response(openmetrics.generate_latest(REGISTRY), media_type=openmetrics.CONTENT_TYPE_LATEST)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            WebSocketRoute("/v1/call", call_endpoint),
            WebSocketRoute("/v1/realtime", realtime_endpoint),
            WebSocketRoute("/v1/twilio", twilio_endpoint),
            Route("/", index),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
            Mount("/static", StaticFiles(packages=[STATIC_PACKAGE]), name="static"),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    settings = GatewaySettings()
    setup_logging("gateway", settings.log_level, settings.log_json)
    # uvicorn writes two lines per connection at INFO: anyone could fill the logs by connecting
    # (admission refusals are counted in metrics instead); its warnings and errors stay.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    setup_tracing("gateway")
    if not settings.token_map():
        raise SystemExit("GATEWAY_TOKENS is empty: set at least one TOKEN=USER_ID pair")
    try:
        internal_token()  # the upstream channels need it: say so now, not at the first call
    except InternalAuthError as exc:
        raise SystemExit(f"gateway: {exc}") from None
    collector = gc_tuning.configured()  # a bad VOICEBOT_GC stops the gateway here, not once it serves
    config = uvicorn.Config(
        create_app(settings), host=settings.host, port=settings.port,
        # Frames beyond this close the socket with 1009; smaller oversize frames get an error event.
        ws_max_size=settings.max_message_bytes * 4, log_config=None, access_log=False,
        lifespan="on",
        # Off: PCM does not compress, and deflate costs CPU both ways (the bench's former
        # ``deflate`` variant).
        ws_per_message_deflate=False,
        ws=DirectFramesProtocol,
    )
    server = uvicorn.Server(config)

    async def run() -> None:
        serve = asyncio.create_task(server.serve())
        while not server.started and not serve.done():  # noqa: ASYNC110 - uvicorn exposes a flag only
            await asyncio.sleep(0.05)
        if server.started:
            gc_tuning.settle(collector)  # start-up is over: nothing it made is walked by a collection again
            port = server.servers[0].sockets[0].getsockname()[1]
            print(f"READY gateway http={port}", flush=True)
        await serve

    serving.run(run())


if __name__ == "__main__":
    main()
