"""The salon demo's backend: a hair salon's appointment book served over MCP (the third business)."""
