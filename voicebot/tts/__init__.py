"""Text-to-speech service (piper). The only package that imports piper-tts (GPL-3.0)."""
