"""Speech-to-text service: faster-whisper behind a Silero VAD endpointer."""
