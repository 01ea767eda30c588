"""The model's own canned refusal, told apart from an answer.

Small instruct models answer words they cannot place (often the STT's mishearing: "D-serve
breakfast", "It is proud in the evening.") with a stock sentence such as Qwen2.5's "I'm sorry,
but I can't assist with that.", and then copy it: with two of them in the history, the
packaged 1.5B model gave the same sentence to "Do you have vegan desserts?" and "Can I order
takeaway?", which it answers in a session without them. Such turns are stored but not shown to
the model again (``Turn.refused``, context.py).

Only the stock form is matched (a first sentence that is nothing but the apology and "can't
assist/help with that"), so an answer that begins with an apology ("Sorry, we can't help with
parking, but there is a garage nearby.") stays in the history. The words are the language pack's
``refusal``, of the session's language and of the default one.
"""

from __future__ import annotations

import functools
import re

from voicebot.brain.lang import english, pack_or_default


@functools.cache
def _stock_refusal(language: str) -> re.Pattern[str]:
    """The pack's ``refusal`` words in the stock sentence's order: "I'm (so) sorry, (but) I can't
    assist (you with that)."""
    pack = pack_or_default(language)
    refusal, said = pack.refusal, pack.phrases
    return re.compile(
        rf"^\s*(?:(?:{said(refusal.leads)})\s+)?(?:(?:{said(refusal.very)})\s+)?(?:{said(refusal.sorry)})"
        rf"\s*[,.]?\s*(?:(?:{said(refusal.but)})\s+)?(?:{said(refusal.cannot)})\s+(?:{said(refusal.help)})"
        rf"(?:\s+(?:{said(refusal.objects)}))?\s*[.!]", re.I)


def is_refusal(reply: str, language: str = "en") -> bool:
    """The reply opens with the model's stock refusal sentence, in the session's language or the
    default one (the packaged model's stock refusal is English whatever it was asked in)."""
    reply = reply.replace("’", "'")
    return any(_stock_refusal(code).match(reply) for code in {language, english().language})
