"""``voicebot call FILE.wav``: talk to a running gateway from the command line.

Streams the WAV at real-time pace (``--fast``: all at once), then a little
silence so the endpointer can close the utterance; prints the transcript,
the reply and the per-stage latency table from ``turn.metrics``; writes the
reply audio with ``--out``. ``--text`` without ``--out`` is a text-only session: the reply
comes as text alone (no TTS), and a read-back counts as heard once its text arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from voicebot.common.audio import write_wav
from voicebot.gateway.call_result import FRAME_MS, TRAILING_SILENCE_MS, CallResult, load_audio

# Events that say a turn is under way (its speech, transcript or reply), until its turn.metrics.
TURN_EVENTS = frozenset({"transcript.partial", "transcript.final", "reply.delta", "audio.start"})
STAGES = ("endpoint", "stt", "llm_ttft", "first_clause", "tts_ttfa", "voice_to_voice")


async def call(url: str, token: str, wav: str | None = None, text: str | None = None,
               fast: bool = False, timeout: float = 120.0, progress=None,
               session_id: str | None = None, output: str = "audio", language: str = "en") -> CallResult:
    import websockets

    say = progress or (lambda _msg: None)
    result = CallResult()
    pcm, rate = load_audio(wav) if wav else (b"", 16000)
    async with websockets.connect(
        url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=2**22
    ) as ws:
        await ws.send(json.dumps({"type": "session.start", "session_id": session_id, "language": language,
                                  "audio": {"encoding": "pcm16", "sample_rate": rate}, "output": output}))
        started = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if started.get("type") != "session.started":
            raise RuntimeError(f"session not started: {started}")
        result.session_id = started["session_id"]
        result.audio_rate = started["audio"]["sample_rate"]
        sender_done = asyncio.Event()

        async def send_audio() -> None:
            frame = rate * FRAME_MS // 1000 * 2
            silence = bytes(rate * TRAILING_SILENCE_MS // 1000 * 2)
            data = pcm + silence
            begin = time.perf_counter()
            for index, offset in enumerate(range(0, len(data), frame)):
                await ws.send(data[offset:offset + frame])
                if not fast:
                    # Real-time pace against the wall clock, so sleep jitter does not add up.
                    await asyncio.sleep(max(0.0, begin + (index + 1) * FRAME_MS / 1000 - time.perf_counter()))
            say(f"sent {len(pcm) * 500 // rate} ms of audio")
            sender_done.set()

        if text is not None:
            await ws.send(json.dumps({"type": "input.text", "text": text}))
            sender_done.set()
            sender = None
        else:
            sender = asyncio.create_task(send_audio())
        try:
            await asyncio.wait_for(_receive(ws, result, sender_done, say), timeout)
        finally:
            if sender:
                sender.cancel()
    return result


async def _receive(ws, result: CallResult, sender_done: asyncio.Event, say) -> None:
    """Events until the call is over: the audio is all sent and the last turn has reported.

    A turn can report (``turn.metrics``) before the trailing silence is all sent: a reply
    started on the speculative transcript ends early. So the sender's end is awaited
    together with the next message, and a call whose last turn is over ends then.
    """
    turn_open, turns_over = False, 0
    sent = asyncio.create_task(sender_done.wait())
    try:
        while True:
            receive = asyncio.ensure_future(ws.recv())
            await asyncio.wait({receive, sent}, return_when=asyncio.FIRST_COMPLETED)
            if not receive.done():
                if turns_over and not turn_open:
                    receive.cancel()
                    return
                await receive
            message = receive.result()
            if isinstance(message, bytes):
                result.audio.extend(message)
                continue
            event = json.loads(message)
            kind = event["type"]
            result.events.append(kind)
            turn_open = turn_open or kind in TURN_EVENTS
            if kind == "transcript.partial":
                result.partials += 1
            elif kind == "transcript.final":
                result.transcripts.append(event["text"])
                say(f"heard: {event['text']}")
            elif kind == "reply.done":
                result.replies.append(event["text"])
                say(f"reply: {event['text']}")
            elif kind == "interrupt":
                result.interrupts += 1
            elif kind == "error":
                result.errors.append(event)
                say(f"error {event['code']}: {event['message']}")
                if event["code"] in ("upstream_unavailable", "internal", "unauthorized"):
                    return
            elif kind == "turn.metrics":
                result.metrics.append(event["ms"])
                turn_open, turns_over = False, turns_over + 1
                if sender_done.is_set():
                    return
    finally:
        sent.cancel()


def latency_table(metrics: dict) -> str:
    rows = ["stage            ms", "---------------  ------"]
    rows += [f"{stage:<15}  {'-' if metrics.get(stage) is None else metrics[stage]:>6}" for stage in STAGES]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voicebot", description="voicebot command-line client")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("call", help="send a WAV (or --text) to the gateway and print the reply")
    p.add_argument("wav", nargs="?", help="16-bit PCM WAV file")
    p.add_argument("--text", help="send a typed turn instead of audio (the reply comes as text only, "
                                  "unless --out asks for its audio)")
    p.add_argument("--out", help="write the reply audio to this WAV file")
    p.add_argument("--url", default=os.environ.get("VOICEBOT_URL", "ws://127.0.0.1:8080/v1/call"))
    p.add_argument("--token", default=os.environ.get("VOICEBOT_TOKEN"))
    p.add_argument("--fast", action="store_true", help="send the audio at once, not in real time")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--session", help="resume this session (printed by an earlier call)")
    p.add_argument("--language", default="en", help="the session's language: one the business speaks")
    p.add_argument("--protocol", choices=("v1", "realtime"), default="v1",
                   help="the gateway's own protocol (/v1/call) or the OpenAI Realtime API (/v1/realtime)")
    check = sub.add_parser("profile", help="work with a business's profile").add_subparsers(
        dest="action", required=True).add_parser(
        "check", help="check a profile strictly (keys, templates, tools, tasks, knowledge) and print "
                      "what the brain derives from it; the same check make run does")
    check.add_argument("path", help="a profile YAML, or a shipped business's name (restaurant)")
    check.add_argument("--no-knowledge", action="store_true", help="skip indexing the knowledge")
    args = parser.parse_args(argv)
    if args.command == "profile":
        from voicebot.brain.business import profile_check

        return profile_check.main(args.path, knowledge=not args.no_knowledge)
    if not args.token:
        parser.error("--token (or VOICEBOT_TOKEN) is required; `make run` prints one")
    if not args.wav and args.text is None:
        parser.error("give a WAV file or --text")

    def progress(msg: str) -> None:
        print(f"… {msg}", file=sys.stderr, flush=True)

    if args.protocol == "realtime" and args.session:
        parser.error("--session is for protocol v1 (a Realtime session lives as long as its socket)")
    text_only = args.text is not None and not args.out  # a typed turn read as text, unless audio is wanted
    try:
        if args.protocol == "realtime":
            from voicebot.gateway.cli_realtime import call_realtime

            result = asyncio.run(call_realtime(args.url, args.token, args.wav, args.text, args.fast,
                                               args.timeout, progress, text_only))
        else:
            result = asyncio.run(call(args.url, args.token, args.wav, args.text, args.fast,
                                      args.timeout, progress, args.session,
                                      "text" if text_only else "audio", args.language))
    except (TimeoutError, OSError) as exc:
        print(f"call failed: {exc!r} (is the stack running? `make run`)", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - e.g. a 4401 close from a bad token
        print(f"call failed: {exc}", file=sys.stderr)
        return 1
    print(f"session:    {result.session_id}")
    print(f"transcript: {' | '.join(result.transcripts) or '-'}")
    print(f"reply:      {' | '.join(result.replies) or '-'}")
    for metrics in result.metrics:
        print(latency_table(metrics))
    if args.out and result.audio:
        write_wav(args.out, bytes(result.audio), result.audio_rate)
        seconds = len(result.audio) / 2 / result.audio_rate
        print(f"reply audio: {args.out} ({seconds:.2f} s)")
    return 0 if result.replies and not result.errors else 2


if __name__ == "__main__":
    sys.exit(main())
