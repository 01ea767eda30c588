"""gRPC core settings every service process starts with.

gRPC reads these from the environment once, when the library starts, before any code of ours
runs; so they are set where processes are started: ``voicebot.devstack.Stack`` (``make run``,
the benches, the tests) and the service images (``docker/*.Dockerfile``). One the operator set,
even empty, wins.

``GRPC_EXPERIMENTS``: since 1.6x gRPC moves every message through its EventEngine's threads: a
poller thread wakes a worker, which reads the socket and wakes the completion-queue thread,
which wakes the event loop (``strace -f`` of an echo server: four threads for one message), and
a write goes out from a worker thread too. Turning the EventEngine off for the endpoints takes
gRPC's older path: the completion-queue thread reads the socket itself and the event loop
writes its own messages, so a message and its answer on an open stream take fewer thread
hand-offs and less time (``make bench-gateway`` measures a turn with and without).
"""

from __future__ import annotations

from collections.abc import Mapping

GRPC_EXPERIMENTS = "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"


def grpc_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings a service process gets: ours, unless ``environ`` sets its own."""
    return {"GRPC_EXPERIMENTS": environ.get("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)}
