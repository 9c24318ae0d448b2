# syntax=docker/dockerfile:1
# h2ping as a container sidecar:  docker build -t h2ping .
#
# The two pip commands are the steps in docs/running.md's "Container" section, word for word;
# tests/integration/test_container.py checks that and runs them in a fresh venv.

# --- build: turn the source into a wheel --------------------------------------------
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY h2ping/ h2ping/
RUN pip wheel --no-deps -w wheels .

# --- run: the wheel and its dependencies, nothing else --------------------------------
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# The wheel is mounted for this one step, so it never becomes a layer of the image.
RUN --mount=type=bind,from=build,source=/src/wheels,target=/src/wheels \
    pip install wheels/h2ping-*.whl
WORKDIR /
RUN groupadd --system --gid 10001 h2ping \
    && useradd --system --uid 10001 --gid h2ping --no-create-home --shell /usr/sbin/nologin h2ping
USER 10001:10001

# Every setting is a flag or an H2PING_* variable; flags win. The proxy itself stays
# on 127.0.0.1:1250: in a pod or a compose service sharing its network namespace the
# app reaches it on localhost, and nobody else can (it has no authentication). The
# admin endpoint (read-only) listens on all interfaces for probes and scrapers.
ENV H2PING_ADMIN_LISTEN=0.0.0.0:9901
EXPOSE 9901
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ['H2PING_ADMIN_LISTEN'].rpartition(':')[2]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2)"]
ENTRYPOINT ["h2ping"]
