"""The brain: an agent loop over any OpenAI-compatible LLM server, sessions in Redis."""
