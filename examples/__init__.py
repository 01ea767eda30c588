"""Demo businesses: a profile, its knowledge and its MCP server each (make run PROFILE=...)."""
