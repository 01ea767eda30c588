# Redis from Debian's packages, for the offline path (docker/compose.offline.yml): where the
# official redis image cannot be pulled, compose builds this one on BASE_IMAGE instead. It runs
# the same start script as the official image does in docker-compose.yml and k8s/base/redis.yaml
# (redis-server and redis-cli on PATH, `sh`, the data in /data), as that image's uid 999:1000.
# Build from the repository root:
#   docker build -f docker/redis.Dockerfile --build-arg BASE_IMAGE=voicebot/base:bookworm -t voicebot/redis:0.1.0 .
ARG BASE_IMAGE
FROM ${BASE_IMAGE:-python:3.11.11-slim-bookworm}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o 999 -g 1000 -m 0750 /data
WORKDIR /data
USER 999:1000
EXPOSE 6379
# As compose's own check (redis-cli reads the password from REDISCLI_AUTH).
HEALTHCHECK --interval=5s --timeout=3s --retries=10 CMD ["redis-cli", "ping"]
CMD ["redis-server"]
