"""Korean numbers as a Korean speaker says them before a counter, for the voice.

Korean counts people, things and hours with native numbers ("2명" is 두 명, "7시" is 일곱 시)
and minutes, days and money with Sino-Korean ones ("30분" is 삼십 분). A voice that reads every
digit the Sino-Korean way (espeak-ng) says "칠 시" for 7 o'clock; here the native counters get
their native words, and every other number is left to the voice.
"""

from __future__ import annotations

import re

# The counter forms of the native numbers 1-9 and the tens 10-90 (한 명, 두 시, 스무 살).
_ONES = ("", "한", "두", "세", "네", "다섯", "여섯", "일곱", "여덟", "아홉")
_TENS = ("", "열", "스무", "서른", "마흔", "쉰", "예순", "일흔", "여든", "아흔")
# Counters that take native numbers; 시간 before 시, so "2시간" is 두 시간.
_NATIVE_COUNTER = re.compile(r"(?<![\d.,:])(\d{1,2})(\s?)(시간|시|명|사람|개|살|잔|병|마리|군데|번째|번)")


def native_number(n: int) -> str:
    """1-99 in native Korean counter form ("스물두", "열한")."""
    tens, ones = divmod(n, 10)
    if tens == 2 and ones:
        return "스물" + _ONES[ones]
    return _TENS[tens] + _ONES[ones]


def korean_speakable(text: str) -> str:
    """Digits before a native counter as native words: "오후 7시에 2명" -> "오후 일곱 시에 두 명"."""
    def native(match: re.Match[str]) -> str:
        number = int(match[1])
        if not 1 <= number <= 99:
            return match[0]
        return f"{native_number(number)} {match[3]}"

    return _NATIVE_COUNTER.sub(native, text)
