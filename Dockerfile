# deepagents images: one Dockerfile, a target per role.
#
#   docker build --target worker  -t deepagents-worker  .   # workers, exporter, model simulator
#   docker build --target gateway -t deepagents-gateway .   # the HTTP gateway (+ [gateway])
#   docker build --target audit   -t deepagents-audit   .   # db migrate, audit writer (+ [audit])
#
# A target per role, not one image with every extra: a role's image holds only the packages
# it runs (a worker has no web framework, no PostgreSQL driver), and each target carries its
# role's HEALTHCHECK. The three share every layer up to the install of their wheels.
# Each installs [otlp] too, so DEEPAGENTS_OTLP_ENDPOINT works in every role.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY deepagents ./deepagents
COPY agents ./agents
# Wheels of the project and of every dependency of every role; the roles install from here
# without reaching an index, so all three get the same versions.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[gateway,audit,otlp]"

FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEEPAGENTS_CONFIG=/app/config/deepagents.yaml \
    DEEPAGENTS_LOG_FORMAT=json
RUN groupadd --system --gid 10001 deepagents \
    && useradd --system --uid 10001 --gid deepagents --home-dir /app --shell /usr/sbin/nologin deepagents
WORKDIR /app
COPY config/deepagents.yaml ./config/deepagents.yaml

FROM base AS worker
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "deepagents-middleware[otlp]"
USER 10001:10001
# /metrics and /healthz on every address of the container: Prometheus scrapes from another.
ENV DEEPAGENTS_METRICS_PORT=9100 \
    DEEPAGENTS_METRICS_HOST=0.0.0.0
EXPOSE 9100
# Live: the worker's event loop turns (GET /healthz beside /metrics). The exporter and the
# simulator also run from this target; docker-compose.yml gives them their own checks.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['DEEPAGENTS_METRICS_PORT'] + '/healthz', timeout=4)"]
CMD ["deepagents", "worker", "agents.echo:EchoAgent"]

FROM base AS gateway
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "deepagents-middleware[gateway,otlp]"
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
CMD ["deepagents", "gateway", "--host", "0.0.0.0", "--port", "8000"]

FROM base AS audit
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "deepagents-middleware[audit,otlp]"
USER 10001:10001
# The audit writer serves nothing: alive while its process runs.
HEALTHCHECK --interval=30s --timeout=5s --retries=3 \
    CMD ["python", "-c", "import os; os.kill(1, 0)"]
CMD ["deepagents", "audit-writer"]
