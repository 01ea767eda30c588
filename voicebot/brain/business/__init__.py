"""A business as data: its profile, the tasks built from its tools' schemas, references,
knowledge, and the profile check."""
