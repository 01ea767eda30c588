"""The clinic demo's backend: a small medical-appointment service served over MCP (the second business)."""
