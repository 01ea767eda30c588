"""Stage 1, read: the caller's words into a structured reading (rules, embeddings, the model
under a schema); the urgent check and the topic guard read every turn too."""
