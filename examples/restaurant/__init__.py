"""The reservation demo's backend: a small restaurant booking service served over MCP."""
