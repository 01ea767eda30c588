"""The model's own canned refusal, told apart from an answer.

Small instruct models answer words they cannot place (often the STT's mishearing: "D-serve
breakfast", "It is proud in the evening.") with a stock sentence such as Qwen2.5's "I'm sorry,
but I can't assist with that.", and then copy it: with two of them in the history, the
packaged 1.5B model gave the same sentence to "Do you have vegan desserts?" and "Can I order
takeaway?", which it answers in a session without them. Such turns are stored but not shown to
the model again (``Turn.refused``, context.py).

Only the stock form is matched (a first sentence that is nothing but the apology and "can't
assist/help with that"), so an answer that begins with an apology ("Sorry, we can't help with
parking, but there is a garage nearby.") stays in the history. English only: other languages'
refusals are not recognised and stay in it too.
"""

from __future__ import annotations

import re

_STOCK_REFUSAL = re.compile(
    r"^\s*(?:i(?:'|’)?m |i am )?(?:so |very |really )?sorry\s*[,.]?\s*(?:but\s+)?"
    r"i\s+(?:can(?:'|’)?t|cannot|can not|am unable to|am not able to|won(?:'|’)t be able to)\s+"
    r"(?:assist|help)(?:\s+you)?(?:\s+with\s+(?:that|this)(?:\s+request)?)?\s*[.!]",
    re.IGNORECASE)


def is_refusal(reply: str) -> bool:
    """The reply opens with the model's stock refusal sentence."""
    return bool(_STOCK_REFUSAL.match(reply))
