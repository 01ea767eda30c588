"""The model's stock refusal, told apart from answers that happen to open with an apology."""

from voicebot.brain.read.refusals import is_refusal

CASES = [
    # (the model's reply, a stock refusal)
    ("I'm sorry, but I can't assist with that.", True),
    ("I’m sorry, but I can’t assist with that.", True),  # typographic apostrophes
    ("Sorry, I cannot help with that request.", True),
    ("I'm sorry, I can't help you with that. Is there anything else?", True),
    ("I am sorry, but I am unable to assist with this.", True),
    ("Sorry, we can't help with parking, but there is a garage nearby.", False),
    ("I'm sorry, I can't help with parking.", False),
    ("I'm sorry, but we are closed on Mondays.", False),
    ("Yes, we have vegan desserts.", False),
    ("", False),
]


def test_stock_refusals_table():
    for reply, expected in CASES:
        assert is_refusal(reply) is expected, reply
