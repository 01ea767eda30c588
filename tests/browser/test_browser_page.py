"""The browser page at `/` in headless Chromium (Debian's `chromium`, driven by Playwright), with a
fake microphone that plays a WAV: the business it speaks for, a microphone level, speech in, a
transcript (partial, then final) and reply audio out, an interruption that stops playback and is
marked in the conversation, and the next turn's time per stage from `turn.metrics`.

The fake-microphone file asks a question whose answer is long, then ~6 s later, while the bot is
still reading it, a short question: that is the barge-in, and the short answer plays to the end.
The file loops; when its first question comes again, the page is kept as a screenshot in the test
logs (browser/page.png).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.audio import silence, speech
from tests.conftest import LOG_ROOT
from tests.fakes.stack_profile import HOURS, MENU, PARKING, PROFILE, answer
from voicebot.common.audio import float_to_pcm16, write_wav

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("VOICEBOT_CHROMIUM", "/usr/bin/chromium")  # Debian's chromium by default
QUESTION = MENU  # the stack's FAQ: its answer is long (~20 s spoken), so the next question cuts it
LONG_REPLY = answer(MENU)
INTERRUPTION = PARKING  # its answer is short: it plays to the end
SCREENSHOT = LOG_ROOT / "browser" / "page.png"


def chromium_args(wav: str) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required"]


@pytest.fixture(scope="module")
def microphone_wav(tmp_path_factory) -> str:
    # Looped by Chromium: the question whose answer is long, and ~6 s into that answer a short
    # question that interrupts it, then quiet while its short answer plays to the end.
    audio = np.concatenate([silence(300), speech(QUESTION), silence(5500), speech(INTERRUPTION),
                            silence(9000)])
    path = tmp_path_factory.mktemp("mic") / "question.wav"
    write_wav(path, float_to_pcm16(audio), 16000)
    return str(path)


@pytest.fixture
async def browser(microphone_wav):
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); "
                    ".ci/run installs it")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[dev]' (it is a dev dependency)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM,
                                                   args=chromium_args(microphone_wav))
        try:
            yield browser
        finally:
            await browser.close()


# Every caller's message the page shows as partial words (a partial can be on screen for only
# ~100 ms on a busy machine: STT's interim decodes then come just before the final).
WATCH_PARTIALS = """() => { window.partialsShown = [];
  new MutationObserver(() => { const p = document.querySelector("#log .you.partial");
    if (p) window.partialsShown.push(p.textContent); })
    .observe(document.getElementById("log"), {subtree: true, childList: true, characterData: true}); }"""


async def test_speak_hear_the_reply_and_interrupt_it(services, scripted_llm, browser):
    page = await browser.new_page(viewport={"width": 1000, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{services.http_url}/?token=tok-alice")

    # The business the bot speaks for (the brain's profile, through the gateway's settings).
    assert await page.inner_text("#agent") == PROFILE.name
    assert (await page.inner_text("#purpose")).lower() == PROFILE.purpose.lower()
    assert PROFILE.name in await page.title()
    await page.evaluate(WATCH_PARTIALS)
    await page.click("#start")

    # The microphone level moves with the speech; the words show as a partial, then as the final.
    await page.wait_for_function("window.vb.micPeak > 0.4", timeout=30_000)
    await page.wait_for_selector("#log .you:not(.partial)", timeout=30_000)
    assert "menu" in (await page.inner_text("#log .you .text")).lower()
    assert any(text.strip() for text in await page.evaluate("window.partialsShown"))

    # The reply streams as text and audio that plays.
    await page.wait_for_function("window.vb.maxPlayedMs > 1000", timeout=30_000)
    assert (await page.inner_text("#log .bot .text")).startswith(LONG_REPLY[:30])
    assert await page.evaluate("window.vb.playing()")
    assert await page.inner_text("#status") == "speaking"

    # The next question talks over the long reply: `interrupt` arrives and playback stops at once.
    await page.wait_for_function("window.vb.interrupts > 0", timeout=30_000)
    state = await page.evaluate(
        "({after: window.vb.playingAfterInterrupt, played: window.vb.playedAtInterrupt})")
    assert state["after"] is False
    # Some of the reply was heard and it was cut well before its end (~14 s); how much depends on
    # how busy the machine is (the microphone file plays on regardless), so only that it played.
    assert 0 < state["played"] < 14_000
    # What the page showed once the interrupt was handled (by now the next reply may be speaking).
    assert await page.evaluate("window.vb.statusAtInterrupt") == "hearing you"
    # ... and the conversation marks it on the reply that was cut, with the caller's words after it.
    assert "barge-in" in await page.inner_text("#log .bot.cut .barge")
    # (the long reply: on a busy machine another message may come to stand above it in the log)
    assert (await page.locator("#log .bot.cut .text").first.inner_text()).startswith(LONG_REPLY[:30])

    # The interrupting question gets its own (short) answer; its time per stage is shown under it.
    await page.wait_for_function("window.vb.metrics !== undefined", timeout=30_000)
    assert "parking" in (await page.locator("#log .bot.cut ~ .you").first.inner_text()).lower()
    timing = page.locator("#log .bot:not(.cut) .timing")
    assert await timing.count() == 1
    text = await timing.inner_text()
    assert "voice-to-voice" in text and "LLM first token" in text and "TTS" in text
    assert await timing.locator(".seg").count() >= 3
    assert await page.evaluate("window.vb.framesAfterInterrupt") == 0
    events = await page.evaluate("window.vb.events")
    first_interrupt = events.index("interrupt")
    assert events.index("transcript.partial") < events.index("transcript.final")
    assert events.index("audio.start") < first_interrupt < events.index("turn.metrics")

    # The file loops: when its first question comes again, under the finished turns, the page is
    # kept as a screenshot with every part of it in view.
    await page.wait_for_function("document.querySelector('#log .bot:not(.cut) ~ .you')", polling=50,
                                 timeout=30_000)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOT, full_page=True)
    assert errors == []
    await page.click("#stop")


async def test_a_typed_question_gets_its_reply_and_its_stages(services, scripted_llm, browser):
    # No microphone: the socket opens on the first message. A typed turn has no endpoint or STT.
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{services.http_url}/?token=tok-alice")
    await page.fill("#text", HOURS)
    await page.press("#text", "Enter")
    await page.wait_for_selector("#log .bot .timing", timeout=30_000)
    assert await page.inner_text("#log .you .text") == HOURS
    assert await page.inner_text("#log .bot .text") == answer(HOURS)
    stages = await page.inner_text("#log .bot .timing .stages")
    assert "LLM first token" in stages and "TTS" in stages and "endpoint" not in stages
    assert await page.evaluate("window.vb.micPeak") == 0
    assert errors == []
    await page.click("#stop")
