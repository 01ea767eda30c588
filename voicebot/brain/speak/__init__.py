"""Stage 4, speak: code's sentences about actions and values, fit for the ear."""
