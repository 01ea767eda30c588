"""What TTS reads for a sentence: stray markdown out, numbers, times, money and units as words."""

import pytest

from voicebot.common.speech_text import speakable
from voicebot.tts.normalize import prepare, strip_markdown


@pytest.mark.parametrize(("text", "spoken"), [
    ("It is 5 km away.", "It is five kilometers away."),
    ("Bring 1 kg of rice.", "Bring one kilogram of rice."),
    ("Drive at 50 km/h or 30 mph.", "Drive at fifty kilometers per hour or thirty miles per hour."),
    ("It is 25°C, 77 °F.", "It is twenty-five degrees Celsius, seventy-seven degrees Fahrenheit."),
    ("Cook for 10 mins, then 1 min more.", "Cook for ten minutes, then one minute more."),
    ("A 1.5 L bottle and 200g of flour.", "A one point five liters bottle and two hundred grams of flour."),
    ("The room is 12 m long.", "The room is twelve meters long."),
    ("It costs €12.50 or £1.01.", "It costs twelve euros fifty cents or one pound one penny."),
    ("£20 a head.", "twenty pounds a head."),
    ("Meet at 5 in the morning.", "Meet at five in the morning."),  # "in" is a word, not inches
    ("See you at 7 am.", "See you at seven a m."),  # a.m. is not "a meters"
])
def test_units_and_currencies(text, spoken):
    assert speakable(text) == spoken


@pytest.mark.parametrize(("text", "language", "spoken"), [
    # English
    ("**Sure**, it is $12.50 for 2.", "en", "Sure, it is twelve dollars fifty cents for two."),
    ("- A *window* seat at 7:30 pm.", "en", "A window seat at seven thirty p m."),
    ("1. Call us at the front desk.", "en", "Call us at the front desk."),
    ("## Opening hours", "en", "Opening hours"),
    ("> Booked for __Friday__.", "en", "Booked for Friday."),
    ("See [our menu](https://example.com/menu) online.", "en", "See our menu online."),
    ("Details at https://example.com/x today.", "en", "Details at today."),
    ("Type `yes` to confirm.", "en", "Type yes to confirm."),
    ("Fish & chips, ~~10~~ 8 dollars.", "en", "Fish and chips, eight dollars."),
    ("| Day | Time |", "en", "Day Time"),
    ("snake_case_name stays, 2 * 3 too.", "en", "snake_case_name stays, two three too."),
    ("**", "en", ""),
    ("On March 3rd, a 15% discount.", "en", "On March third, a fifteen percent discount."),
    # Korean: markdown goes; numbers are left to the voice, which reads them in Korean.
    ("**네**, 7시 30분에 예약했어요.", "ko", "네, 일곱 시 30분에 예약했어요."),
    ("- 창가 *자리*로 2명입니다.", "ko", "창가 자리로 두 명입니다."),
    ("## 영업 시간", "ko", "영업 시간"),
    ("[메뉴](https://example.com) 보기", "ko", "메뉴 보기"),
    ("5 km 거리예요.", "ko", "5 km 거리예요."),
])
def test_prepare(text, language, spoken):
    assert prepare(text, language) == spoken


def test_markdown_only_is_nothing_to_say():
    assert strip_markdown("**  __ ``") == ""
