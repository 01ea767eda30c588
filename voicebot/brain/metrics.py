from prometheus_client import Counter, Histogram

from voicebot.common.metrics import LATENCY_BUCKETS

LLM_FALLBACKS = Counter("voicebot_llm_fallbacks_total", "Turns answered with the fallback sentence")
LLM_TTFT_SECONDS = Histogram(
    "voicebot_llm_ttft_seconds", "Time to first token of an LLM call", buckets=LATENCY_BUCKETS
)
LLM_CALL_SECONDS = Histogram(
    "voicebot_llm_call_seconds", "Duration of an LLM call", buckets=LATENCY_BUCKETS
)
LLM_TOKENS = Counter("voicebot_llm_tokens_total", "Tokens reported by the LLM server", ["kind"])
GUARD_BLOCKS = Counter("voicebot_guard_blocks_total", "Turns blocked by the topic guard")
TOOL_CALLS = Counter("voicebot_tool_calls_total", "Tool calls by outcome", ["tool", "outcome"])
TOOL_SECONDS = Histogram("voicebot_tool_seconds", "Tool run time, retries included", ["tool"],
                         buckets=LATENCY_BUCKETS)
# by: "screen" (the embeddings screen passed it, no LLM call) or "llm"; verdict: allow or block.
GUARD_VERDICTS = Counter("voicebot_guard_verdicts_total", "Topic guard verdicts by who decided",
                         ["by", "verdict"])
GUARD_SECONDS = Histogram("voicebot_guard_seconds", "Topic guard verdict time", buckets=LATENCY_BUCKETS)
# How each turn's words were read: rules, embeddings or the model (reading.py).
READINGS = Counter("voicebot_readings_total", "Turns read, by what read them", ["by"])
KNOWLEDGE_ANSWERS = Counter("voicebot_knowledge_answers_total", "Questions answered", ["known"])
# Searches started on the caller's words so far (Brain.Prefill), before the endpoint.
KNOWLEDGE_PREFETCHES = Counter("voicebot_knowledge_prefetches_total", "Knowledge searches started early")
# The answer check's verdicts on passages (answerable.py): "yes", "no", or "none" (it failed).
ANSWER_CHECKS = Counter("voicebot_answer_checks_total", "Passages checked for answering the question",
                        ["verdict"])
HANDOFFS = Counter("voicebot_handoffs_total", "Calls handed to a human", ["reason"])
# The urgent check (urgent.py): by "screen", "model" or "model-failed"; result urgent or not_urgent.
URGENT_CHECKS = Counter("voicebot_urgent_checks_total", "Turns checked for urgent situations",
                        ["by", "result"])
URGENT_TURNS = Counter("voicebot_urgent_turns_total", "Turns answered with an urgent situation's sentence",
                       ["situation"])
