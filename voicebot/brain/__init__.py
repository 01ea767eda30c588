"""The brain: code runs the conversation and the model only reads, over any OpenAI-compatible
LLM server; sessions in Redis.

A turn goes through the stages, each a folder here:

- ``read/``: the caller's words into a reading (rules, embeddings, the model under a schema);
  the urgent check and the topic guard read every turn too;
- ``decide/``: code's next step, one decision of a closed set (``decide/decisions.py``);
- ``act/``: read-only tools, knowledge, and the one confirmed write;
- ``speak/``: code's sentences about actions and values, fit for the ear.

``runtime/`` holds the session around the turn (history, lease, races, storing), ``business/``
what a business is as data (profile, tasks, knowledge); ``server.py`` is the gRPC service.
"""
