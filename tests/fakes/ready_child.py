"""A stand-in service for launcher tests: listens on FAKE_PORT (0 = any free port), prints the
READY line the launcher waits for, answers every connection with its pid, and with
FAKE_EXIT_AFTER_S exits by itself (status 3) after that long: a service that keeps crashing."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading


def main() -> None:
    server = socket.create_server(("127.0.0.1", int(os.environ.get("FAKE_PORT", "0"))))
    port = server.getsockname()[1]
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    exit_after = os.environ.get("FAKE_EXIT_AFTER_S")
    if exit_after:
        threading.Timer(float(exit_after), lambda: os._exit(3)).start()
    print(f"READY fake http={port}", flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            conn.sendall(f"{os.getpid()}\n".encode())


if __name__ == "__main__":
    sys.exit(main())
