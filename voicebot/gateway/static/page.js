"use strict";
// The browser client of protocol v1 (/v1/call; docs/protocols.md).
// Microphone audio goes up as 20 ms PCM16 frames at 16 kHz; reply audio comes down as PCM16 at the
// rate session.started announces and is scheduled back to back on one AudioContext. `interrupt`
// stops every scheduled buffer at once and drops frames of that turn that might still arrive.
const MIC_RATE = 16000, FRAME = 320;
// turn.metrics' stages (voicebot/gateway/turn.py, TurnTimings.stages_ms). endpoint and stt run on
// from the end of the caller's speech; llm_ttft, first_clause and tts_ttfa each end where the next
// begins, the last at the first audio. So the bar draws each chain from its own end, on a row of
// its own: a reply the brain began before the transcript was final shows as overlap, not as a sum.
const HEARD = [["endpoint", "endpoint"], ["stt", "STT"]];
const REPLY = [["llm_ttft", "LLM first token"], ["first_clause", "first clause"], ["tts_ttfa", "TTS"]];

const token = new URLSearchParams(location.search).get("token") || "";
const $ = (id) => document.getElementById(id);
const agent = $("agent").textContent.trim();
let ws, micCtx, micStream, playCtx, outRate = 16000, positionTimer;
let sources = [], playHead = 0, currentTurn = null, dropping = false;
let turnAudioSec = 0;  // audio of the current turn scheduled so far
let partial = null;  // the caller's words so far, until transcript.final
const replies = new Map();  // turn_id -> the bot's message of that turn

// State for the browser test (tests/browser/test_browser_page.py).
const vb = window.vb = { events: [], frames: 0, framesAfterInterrupt: 0, interrupts: 0, partials: 0,
                         maxPlayedMs: 0, micLevel: 0, micPeak: 0,
                         playing: () => !!playCtx && sources.length > 0 && playHead > playCtx.currentTime };

// ---- the conversation --------------------------------------------------------------------------
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

function message(who, text, before = null) {
  const li = el("li", `msg ${who}`);
  li.append(el("span", "who", who === "you" ? "You" : who === "bot" ? agent : ""), el("p", "text", text));
  $("log").insertBefore(li, before);
  $("empty").hidden = true;
  li.scrollIntoView({ block: "nearest" });
  return li;
}

function note(text, cls = "") { return message(`note ${cls}`, text); }

function heard(text, final) {
  // The caller's words: one message that partials rewrite and the final settles.
  if (!partial) partial = message("you partial", "");
  partial.querySelector(".text").textContent = text;
  if (final) { partial.classList.remove("partial"); partial = null; }
}

function reply(turnId) {
  // The bot's message of a turn. It goes above the caller's next words if they are already coming.
  if (!replies.has(turnId)) replies.set(turnId, message("bot", "", partial));
  return replies.get(turnId);
}

function markBargeIn(turnId, playedMs) {
  // Where the caller talked over the reply: the reply as it was when its audio stopped, and the
  // caller's words right after it. How far into the audio: the page's own playback clock.
  const li = replies.get(turnId), text = `barge-in: cut after ${(playedMs / 1000).toFixed(1)} s of speech`;
  if (!li) { note(text); return; }  // a reply of audio only (the fallback sentence)
  li.classList.add("cut");
  li.append(el("span", "barge", text));
}

function showTiming(turnId, ms) {
  const li = reply(turnId);
  const sum = [...HEARD, ...REPLY].reduce((a, [k]) => a + (ms[k] ?? 0), 0);
  const heardEnd = (ms.endpoint ?? 0) + (ms.stt ?? 0);
  const end = Math.max(1, ms.voice_to_voice ?? sum, heardEnd);
  const bar = el("div", "bar"), heardRow = el("div", "row"), replyRow = el("div", "row");
  const seg = (row, k, label, from) => {
    const s = el("span", `seg ${k}`);
    s.style.left = `${100 * Math.max(0, from) / end}%`;
    s.style.width = `${100 * ms[k] / end}%`;
    s.title = `${label} ${ms[k]} ms`;
    row.append(s);
  };
  let at = 0;
  for (const [k, label] of HEARD) if (ms[k] != null) { seg(heardRow, k, label, at); at += ms[k]; }
  if (ms.voice_to_voice != null) {
    // Back from the first audio. Without first_clause, TTS's wait began at its first text: the
    // reply's stages then leave out the gap between the first token and that text.
    let back = ms.voice_to_voice;
    for (const [k, label] of [...REPLY].reverse()) if (ms[k] != null) { back -= ms[k]; seg(replyRow, k, label, back); }
  } else {
    for (const [k, label] of REPLY) if (ms[k] != null) { seg(replyRow, k, label, at); at += ms[k]; }
  }
  bar.append(heardRow, replyRow);
  bar.title = "from the end of your speech to the reply's first audio";
  const total = el("p", "total", "voice-to-voice ");
  total.append(el("b", "", ms.voice_to_voice == null ? "–" : `${ms.voice_to_voice} ms`));
  const stages = el("p", "stages");
  for (const [k, label] of [...HEARD, ...REPLY]) {
    if (ms[k] == null) continue;
    const s = el("span", "stage");
    s.append(el("i", k), `${label} `, el("b", "", String(ms[k])), " ms");
    stages.append(s);
  }
  const timing = el("div", "timing");
  timing.append(total, bar, stages);
  li.querySelector(".timing")?.remove();
  li.append(timing);
}

function status(state, text = state) {
  const pill = $("status");
  pill.textContent = text;
  pill.dataset.state = state;
}

// ---- audio out ---------------------------------------------------------------------------------
function send(obj) { if (ws && ws.readyState === 1) ws.send(JSON.stringify(obj)); }

function playedMs() {
  // What the listener heard of this turn: scheduled so far less what is still ahead of the play head.
  if (!playCtx) return 0;
  return Math.max(0, Math.round((turnAudioSec - Math.max(0, playHead - playCtx.currentTime)) * 1000));
}

function stopPlayback() {
  for (const s of sources) { try { s.stop(); } catch (e) { /* already ended */ } }
  sources = []; playHead = playCtx ? playCtx.currentTime : 0;
}

function play(buf) {
  vb.frames++;
  if (dropping || !currentTurn) { vb.framesAfterInterrupt += dropping ? 1 : 0; return; }
  const pcm = new Int16Array(buf), f = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
  const b = playCtx.createBuffer(1, f.length, outRate); b.copyToChannel(f, 0);
  const src = playCtx.createBufferSource(); src.buffer = b; src.connect(playCtx.destination);
  playHead = Math.max(playHead, playCtx.currentTime + 0.03); src.start(playHead); playHead += b.duration;
  turnAudioSec += b.duration;
  sources.push(src); src.onended = () => { sources = sources.filter(x => x !== src); };
}

// ---- events ------------------------------------------------------------------------------------
function onEvent(ev) {
  vb.events.push(ev.type);
  switch (ev.type) {
    case "session.started": outRate = ev.audio.sample_rate; status("listening"); break;
    case "transcript.partial":
      vb.partials++; heard(ev.text, false);
      if (!vb.playing()) status("hearing", "hearing you");
      break;
    case "transcript.final": heard(ev.text, true); status("thinking"); break;
    case "reply.delta": reply(ev.turn_id).querySelector(".text").textContent += ev.text; break;
    case "reply.done": reply(ev.turn_id).querySelector(".text").textContent = ev.text; break;
    case "audio.start": currentTurn = ev.turn_id; dropping = false; turnAudioSec = 0; status("speaking"); break;
    case "audio.end": status("listening"); break;
    case "interrupt":
      vb.interrupts++; vb.playedAtInterrupt = playedMs();
      stopPlayback(); dropping = true; currentTurn = null;
      vb.playingAfterInterrupt = vb.playing();
      markBargeIn(ev.turn_id, vb.playedAtInterrupt); status("hearing", "hearing you");
      vb.statusAtInterrupt = $("status").textContent; break;
    case "turn.metrics": vb.metrics = ev.ms; showTiming(ev.turn_id, ev.ms); break;
    case "error": note(`error ${ev.code}: ${ev.message}`, "err"); break;
  }
}

// ---- microphone --------------------------------------------------------------------------------
function showLevel(pcm) {
  // RMS of the frame in dBFS, -60..0 onto the meter; it falls back slowly so a word stays visible.
  let sum = 0;
  for (let i = 0; i < pcm.length; i++) sum += pcm[i] * pcm[i];
  const db = 20 * Math.log10(Math.sqrt(sum / pcm.length) / 32768 + 1e-9);
  const level = Math.min(1, Math.max(0, (db + 60) / 60));
  vb.micLevel = Math.max(level, vb.micLevel * 0.9);
  vb.micPeak = Math.max(vb.micPeak, level);
  $("level").firstElementChild.style.width = `${100 * vb.micLevel}%`;
  $("level").setAttribute("aria-valuenow", String(Math.round(vb.micLevel * 100)));
}

async function startMic() {
  micStream = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 } });
  micCtx = new AudioContext({ sampleRate: MIC_RATE });
  const worklet = `registerProcessor("pcm", class extends AudioWorkletProcessor {
    constructor() { super(); this.buf = new Float32Array(${FRAME}); this.n = 0; }
    process(inputs) { const ch = inputs[0][0]; if (!ch) return true;
      for (const v of ch) { this.buf[this.n++] = v;
        if (this.n === ${FRAME}) { const out = new Int16Array(${FRAME});
          for (let i = 0; i < ${FRAME}; i++) out[i] = Math.max(-1, Math.min(1, this.buf[i])) * 32767;
          this.port.postMessage(out.buffer, [out.buffer]); this.n = 0; } }
      return true; } });`;
  await micCtx.audioWorklet.addModule(URL.createObjectURL(new Blob([worklet], { type: "application/javascript" })));
  const node = new AudioWorkletNode(micCtx, "pcm");
  node.port.onmessage = (m) => {
    showLevel(new Int16Array(m.data));
    if (ws && ws.readyState === 1) ws.send(m.data);
  };
  micCtx.createMediaStreamSource(micStream).connect(node);
}

// ---- session -----------------------------------------------------------------------------------
async function start(withMic = true) {
  status("connecting", "connecting…");
  $("start").disabled = true;
  playCtx = new AudioContext();
  await playCtx.resume();
  ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/call?token=${encodeURIComponent(token)}`);
  ws.binaryType = "arraybuffer";
  ws.onmessage = (m) => typeof m.data === "string" ? onEvent(JSON.parse(m.data)) : play(m.data);
  ws.onclose = (e) => {
    note(e.code === 4401 ? "the gateway refused the token: open this page as /?token=YOUR_TOKEN"
      : `connection closed (${e.code}${e.reason ? ": " + e.reason : ""})`, "err");
    ws = null; status("closed"); ended();
  };
  // A socket that fails to open also closes: its close handler says how.
  await new Promise((ok, fail) => { ws.onopen = ok; ws.onerror = () => fail(null); });
  send({ type: "session.start", session_id: null, language: "en", audio: { encoding: "pcm16", sample_rate: MIC_RATE } });
  if (withMic) await startMic();
  positionTimer = setInterval(() => {
    if (!currentTurn) return;
    const played = playedMs(); vb.maxPlayedMs = Math.max(vb.maxPlayedMs, played);
    send({ type: "playback.position", turn_id: currentTurn, played_ms: played });
  }, 100);
  $("stop").disabled = false;
}

function ended() {
  if (micStream) micStream.getTracks().forEach(t => t.stop());
  if (micCtx) micCtx.close();
  micStream = micCtx = null;
  clearInterval(positionTimer); stopPlayback(); currentTurn = null;
  vb.micLevel = 0; $("level").firstElementChild.style.width = "0";
  $("start").disabled = false; $("stop").disabled = true;
}

function stop() {
  if (ws) { send({ type: "session.end" }); ws.onclose = null; ws.close(1000); ws = null; }
  status("idle"); ended();
}

function failed(err) {
  if (err) note(String(err.message || err), "err");  // e.g. no microphone, or it was not allowed
  stop(); status("closed");
}

$("start").onclick = () => start().catch(failed);
$("stop").onclick = stop;
$("typed").onsubmit = async (e) => {
  e.preventDefault();
  const text = $("text").value.trim();
  if (!text) return;
  $("text").value = "";
  if (!ws || ws.readyState !== 1) {
    try { await start(false); } catch (err) { failed(err); return; }
  }
  message("you", text, partial); status("thinking");
  send({ type: "input.text", text });
};
if (!token) {
  $("hint").innerHTML = "Open this page as <code>/?token=YOUR_TOKEN</code> (<code>make run</code> prints the address).";
  $("hint").classList.add("warn");
}
