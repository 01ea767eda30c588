"""Stage 3, act: tools and writes (only a confirmed action), knowledge lookups, tool errors by rule."""
