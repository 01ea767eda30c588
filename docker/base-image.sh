#!/usr/bin/env bash
# The base image for machines that reach Debian's packages and PyPI but no image registry: Debian
# (this machine's suite, from this machine's Debian mirror) with Python 3 and venv, made with
# debootstrap --variant=minbase and imported with `docker import`. Every image in docker/ builds
# on it with --build-arg BASE_IMAGE=voicebot/base:SUITE (docs/operations.md, "Offline").
# The image's apt sources are the Debian ones this machine uses, and it trusts the certificate
# authorities this machine adds to its own (/usr/local/share/ca-certificates), so apt and pip
# inside a build reach the registries as this machine does (behind a TLS-inspecting proxy too:
# pip is pointed at the system's certificates, PIP_CERT, instead of its own list).
# Usage: sudo bash docker/base-image.sh [IMAGE]  (default voicebot/base:SUITE; kept when it exists,
# FORCE=1 makes it again). Needs debootstrap and a running docker daemon. Prints the image's name.
set -euo pipefail

SUITE=${DEBIAN_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}")}
IMAGE=${1:-voicebot/base:$SUITE}
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing (Debian: apt-get install debootstrap)" >&2; exit 1; }

# The Debian archives apt uses here, as "deb URI DIST COMPONENT" lines: the suite, its updates
# and its security archive, whatever the sources files' format (apt-cache policy reads them all).
debian_sources() {
  apt-cache policy | awk -v suite="$SUITE" '
    $1 ~ /^[0-9]+$/ && $2 ~ /^(https?|file):/ { uri = $2; split($3, dist, "/"); next }
    $1 == "release" && uri != "" && $2 ~ /o=Debian,/ && $2 ~ ("n=" suite "(-[a-z]+)?(,|$)") {
      line = "deb " uri " " dist[1] " " dist[2]
      if (!(line in seen)) { seen[line] = 1; print line }
      uri = ""
    }'
}
SOURCES=$(debian_sources)
MIRROR=${DEBIAN_MIRROR:-$(awk -v suite="$SUITE" '$3 == suite { print $2; exit }' <<<"$SOURCES")}
[ -n "$MIRROR" ] || { echo "no Debian mirror for $SUITE in apt's sources (set DEBIAN_MIRROR)" >&2; exit 1; }

ROOTFS=$(mktemp -d "${TMPDIR:-/tmp}/voicebot-base.XXXXXX")
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 \
  || { tail -n 30 "$ROOTFS.log" >&2; rm -f "$ROOTFS.log"; exit 1; }
rm -f "$ROOTFS.log"
printf '%s\n' "$SOURCES" >"$ROOTFS/etc/apt/sources.list"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/"
  chroot "$ROOTFS" update-ca-certificates >/dev/null 2>&1
fi
chroot "$ROOTFS" apt-get clean
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/log/*.log
tar --numeric-owner -C "$ROOTFS" -c . \
  | docker import --change 'ENV LANG=C.UTF-8' --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
      --change 'CMD ["python3"]' - "$IMAGE" >/dev/null
echo "$IMAGE"
