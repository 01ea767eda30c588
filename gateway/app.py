"""The gateway's ASGI app: WebSocket /v1/call, the browser page, health, readiness, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from importlib.resources import files

import redis.asyncio as aioredis
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from gateway.auth import TokenAuth
from gateway.call import Call
from gateway.config import GatewaySettings
from gateway.metrics import ACTIVE_SESSIONS
from gateway.sessions import SessionRegistry
from gateway.upstreams import Upstreams
from voicebot.common.logs import setup_logging
from voicebot.common.telemetry import setup_tracing, shutdown_tracing

log = logging.getLogger("gateway")

CLOSE_UNAUTHORIZED = 4401


def create_app(settings: GatewaySettings) -> Starlette:
    auth = TokenAuth(settings.token_map())
    state: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        state["upstreams"] = Upstreams(settings.stt_addr, settings.brain_addr, settings.tts_addr)
        state["redis"] = aioredis.Redis.from_url(settings.redis_url)
        state["sessions"] = SessionRegistry(state["redis"], settings.session_ttl_s)
        yield
        await state["upstreams"].close()
        await state["redis"].aclose()
        shutdown_tracing()

    async def call_endpoint(ws: WebSocket) -> None:
        user_id = auth.authenticate(ws)
        if user_id is None:
            # Accept first so the client sees the 4401 close code, not a bare HTTP 403.
            await ws.accept()
            await ws.close(code=CLOSE_UNAUTHORIZED, reason="unauthorized")
            return
        await ws.accept()
        ACTIVE_SESSIONS.inc()
        try:
            await Call(ws, user_id, settings, state["upstreams"], state["sessions"]).run()
        except Exception:
            log.exception("call failed")
            with contextlib.suppress(Exception):
                await ws.close(code=1011, reason="internal error")
        finally:
            ACTIVE_SESSIONS.dec()

    async def index(_request: Request) -> HTMLResponse:
        return HTMLResponse(files("gateway").joinpath("static/index.html").read_text())

    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> JSONResponse:
        checks = await state["upstreams"].health()
        try:
            checks["redis"] = bool(await asyncio.wait_for(state["redis"].ping(), 1.0))
        except Exception:  # noqa: BLE001 - any failure means "not ready"
            checks["redis"] = False
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
            Route("/", index),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    settings = GatewaySettings()
    setup_logging("gateway", settings.log_level, settings.log_json)
    setup_tracing("gateway")
    if not settings.token_map():
        raise SystemExit("GATEWAY_TOKENS is empty: set at least one TOKEN=USER_ID pair")
    config = uvicorn.Config(
        create_app(settings), host=settings.host, port=settings.port,
        # Frames beyond this close the socket with 1009; smaller oversize frames get an error event.
        ws_max_size=settings.max_message_bytes * 4, log_config=None, access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)

    async def run() -> None:
        serve = asyncio.create_task(server.serve())
        while not server.started and not serve.done():  # noqa: ASYNC110 - uvicorn exposes a flag only
            await asyncio.sleep(0.05)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            print(f"READY gateway http={port}", flush=True)
        await serve

    asyncio.run(run())


if __name__ == "__main__":
    main()
