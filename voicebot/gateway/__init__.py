"""The gateway: WebSocket protocol v1, turn orchestration, barge-in, web page, CLI client."""
