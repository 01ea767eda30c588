"""The browser page at `/` in headless Chromium (Debian's `chromium`, driven by Playwright), with a
fake microphone that plays a WAV: speech in, a transcript and reply audio out, and an interruption
that stops playback.

The fake-microphone file asks a question whose answer is long, then ~6 s later, while the bot is
still reading it, a short question: that is the barge-in, and the short answer plays to the end.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.audio import silence, speech
from tests.fakes.stack_profile import MENU, PARKING, answer
from voicebot.common.audio import float_to_pcm16, write_wav

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("VOICEBOT_CHROMIUM", "/usr/bin/chromium")  # Debian's chromium by default
QUESTION = MENU  # the stack's FAQ: its answer is long (~20 s spoken), so the next question cuts it
LONG_REPLY = answer(MENU)
INTERRUPTION = PARKING  # its answer is short: it plays to the end


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


async def test_speak_hear_the_reply_and_interrupt_it(services, scripted_llm, browser):
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{services.http_url}/?token=tok-alice")
    await page.click("#start")

    # The spoken question comes back as a transcript; the reply streams as text and audio that plays.
    await page.wait_for_selector("#log .you", timeout=30_000)
    assert "menu" in (await page.inner_text("#log .you")).lower()
    await page.wait_for_function("window.vb.maxPlayedMs > 1000", timeout=30_000)
    assert (await page.inner_text("#log .bot")).startswith("bot: " + LONG_REPLY[:30])
    assert await page.evaluate("window.vb.playing()")

    # The next question talks over the long reply: `interrupt` arrives and playback stops at once.
    await page.wait_for_function("window.vb.interrupts > 0", timeout=30_000)
    state = await page.evaluate(
        "({after: window.vb.playingAfterInterrupt, played: window.vb.playedAtInterrupt})")
    assert state["after"] is False
    assert 1000 < state["played"] < 14_000  # cut well before the end of a ~14 s reply
    assert await page.inner_text("#status") != "speaking"

    # The interrupting question gets its own (short) answer; its latency is shown per stage.
    await page.wait_for_function("window.vb.metrics !== undefined", timeout=30_000)
    legend = await page.inner_text("#legend")
    assert "voice-to-voice" in legend and "llm_ttft" in legend
    assert await page.locator("#bar span").count() >= 3
    assert await page.evaluate("window.vb.framesAfterInterrupt") == 0
    events = await page.evaluate("window.vb.events")
    first_interrupt = events.index("interrupt")
    assert events.index("audio.start") < first_interrupt < events.index("turn.metrics")
    assert errors == []
    await page.click("#stop")
