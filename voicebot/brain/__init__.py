"""The brain: code runs the conversation (read -> decide -> act -> speak) and the model only
reads, over any OpenAI-compatible LLM server; sessions in Redis."""
