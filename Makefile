# The two commands: `make run` and `make test`. Everything else is a helper.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run check-profile test test-compose setup setup-dev protos lint docs check-protos bench-stt bench-stt-languages bench-brain bench-tts bench-bargein bench-gateway bench-abuse bench-load bench-dialog bench-knowledge bench-answerable bench-reading bench-guard bench-urgent bench-v2v bench-turns bench-turn-scores clean

# make run needs the runtime only; make test (and the benchmarks) add the test tools.
$(VENV)/.installed: pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh

$(VENV)/.installed-dev: pyproject.toml scripts/bootstrap.sh
	DEV=1 bash scripts/bootstrap.sh

setup: $(VENV)/.installed

setup-dev: $(VENV)/.installed-dev

## Start the whole stack locally (redis, llama.cpp server, STT, brain, TTS, gateway).
## PROFILE picks the business: restaurant (default), clinic, or a path to a profile YAML.
PROFILE ?= restaurant
run: setup
	PROFILE=$(PROFILE) $(PY) -m voicebot.devstack

## Check a profile strictly (keys, templates, tools, tasks, knowledge) and print what the brain
## derives from it: make check-profile PROFILE=path/to/profile.yaml (make run runs the same check).
check-profile: setup
	$(VENV)/bin/voicebot profile check $(PROFILE)

## Run the test suite (unit, integration, end-to-end with real models).
test: setup-dev
	bash scripts/test.sh

## docker compose's cpu profile answers a spoken turn end to end, its images built offline on a base
## made from Debian's packages, on the host's network (scripts/test-compose.sh). Not in make test:
## it builds the images (docs/operations.md says how long it takes).
test-compose: setup-dev
	bash scripts/test-compose.sh

protos: setup-dev
	$(PY) -m voicebot.protogen

lint: setup-dev
	$(VENV)/bin/ruff check .

## The documentation site (docs/, mkdocs.yml) into site/; strict: a broken link fails (so does make test).
docs: setup-dev
	$(VENV)/bin/mkdocs build --strict

## Benchmarks (print a table and JSON; not timed tests).
## STT benchmark: generated speech at real-time pace through the real service; prints a table and JSON.
bench-stt: setup-dev
	$(PY) -m bench.stt $(ARGS)

## Speech recognition per language and model, in-process: Korean CER (espeak-ng's Korean voices on
## the restaurant's Korean lines), English WER, decode time; ARGS="--model DIR" adds a candidate.
bench-stt-languages: setup-dev
	$(PY) -m bench.stt_languages $(ARGS)

bench-brain: setup-dev
	$(PY) -m bench.brain $(ARGS)

bench-tts: setup-dev
	$(PY) -m bench.tts $(ARGS)

## Whole caller dialogues per profile through the running stack with the real model: task
## success and safety violations, judged by what the MCP server recorded.
bench-dialog: setup-dev
	$(PY) -m bench.dialog $(ARGS)

## Questions per profile through the running stack: facts the knowledge holds answered with them,
## and questions it does not answer given the unknown-fact sentence (never a guess).
bench-knowledge: setup-dev
	$(PY) -m bench.knowledge $(ARGS)

## Whether a passage answers the question: the candidate checks side by side on labelled pairs.
bench-answerable: setup-dev
	$(PY) -m bench.answerable $(ARGS)

## How well each candidate LLM reads callers' lines (bench/readings.yaml), per language, side by side:
## field and line accuracy, failed readings, time per reading (ARGS="--models shipped --limit 20").
bench-reading: setup-dev
	$(PY) -m bench.reading $(ARGS)

## The topic guard's block rates on tests/guard_corpora with the real model.
bench-guard: setup-dev
	$(PY) -m bench.guard $(ARGS)

## Emergencies in callers' own words and ordinary symptoms at the clinic, typed (and spoken with
## ARGS=--spoken): every emergency must get the urgent sentence first, ordinary turns must not.
bench-urgent: setup-dev
	$(PY) -m bench.urgent $(ARGS)

## Voice to voice at the client through the stack make run starts: spoken questions, guard on
## and off, and booking changes through the model; per-stage p50/p95, table and JSON.
bench-v2v: setup-dev
	$(PY) -m bench.v2v $(ARGS)

## End of turn: the end-of-turn model vs the fixed silence timer through the stack, in one run:
## callers cut off by a thinking pause, endpoint delay, voice to voice, the model's own time.
bench-turns: setup-dev
	$(PY) -m bench.turns $(ARGS)

## The end-of-turn decision's calibration: Smart Turn's scores and the words on complete sentences
## and on sentences cut at a pause, per voice set (people, piper, espeak-ng); each setting replayed.
bench-turn-scores: setup-dev
	$(PY) -m bench.turn_scores $(ARGS)

bench-bargein: setup-dev
	$(PY) -m bench.bargein $(ARGS)

## Gateway capacity and added latency: the real gateway and brain, instant fake STT/TTS, a scripted LLM.
bench-gateway: setup-dev
	$(PY) -m bench.gateway $(ARGS)

## Admitted callers' turn latency, quiet and while 200 sockets without credentials hold /v1/twilio
## and one session floods 50 typed turns a second (own stack; ARGS="--gateway ws://..." for a running one).
bench-abuse: setup-dev
	$(PY) -m bench.abuse $(ARGS)

## N concurrent real-time callers (open microphones, a few speaking) through the real STT and TTS
## (scripted LLM): dropped sessions, errors by code, turn latency percentiles per N, the capacity.
bench-load: setup-dev
	$(PY) -m bench.load $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
