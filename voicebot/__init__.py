"""voicebot: shared code (config, logging, gRPC bootstrap, audio helpers) and generated stubs."""
