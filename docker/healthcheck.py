#!/usr/bin/env python3
"""Container health check for the voicebot images (Dockerfile HEALTHCHECK, compose).

    healthcheck.py grpc PORT_VAR DEFAULT_PORT         grpc.health.v1 Check("") must say SERVING
    healthcheck.py http PORT_VAR DEFAULT_PORT PATH    GET http://127.0.0.1:PORT/PATH must answer 2xx

The port comes from the service's own variable (STT_PORT, GATEWAY_PORT, ...)
so a changed port is checked where it really is. Exit 0 healthy, 1 not
(Docker's convention). Kubernetes does not use this: it probes the same
endpoints natively (grpc / httpGet probes).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 3.0


def check_grpc(port: int) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S
            )
        except grpc.RpcError as exc:
            print(f"unhealthy: gRPC health check on {port} failed: {exc.code()}", file=sys.stderr)
            return False
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        print(f"unhealthy: gRPC health on {port} is {reply.status}", file=sys.stderr)
        return False
    return True


def check_http(port: int, path: str) -> bool:
    url = f"http://127.0.0.1:{port}/{path.lstrip('/')}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:
            return 200 <= reply.status < 300
    except (urllib.error.URLError, OSError) as exc:
        print(f"unhealthy: GET {url} failed: {exc}", file=sys.stderr)
        return False


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("grpc", "http") or (argv[0] == "http" and len(argv) != 4):
        print(__doc__, file=sys.stderr)
        return 2
    kind, port_var, default = argv[0], argv[1], argv[2]
    port = int(os.environ.get(port_var) or default)
    healthy = check_grpc(port) if kind == "grpc" else check_http(port, argv[3])
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
