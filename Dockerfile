# turbogate gateway image: `docker build -t turbogate:0.1.0 .` (docs/deploy.md).
# Stage 1 (the full image: it has a C compiler) builds turbogate with its request path compiled
# by mypyc (TURBOGATE_COMPILE=1, setup.py; about a fifth less CPU a request, docs/install.md) and
# installs it into a virtual environment; stage 2 copies only that environment onto a slim base
# and runs as a non-root user with a read-only root filesystem.
FROM python:3.11-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 TURBOGATE_COMPILE=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY build_support ./build_support
COPY src ./src
RUN python -m venv /opt/turbogate \
 && /opt/turbogate/bin/pip install --no-cache-dir ".[redis,otel]"

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="turbogate" \
      org.opencontainers.image.description="Tiered-latency gateway for self-hosted LLM inference" \
      org.opencontainers.image.licenses="Apache-2.0"
# No .pyc writes (the root filesystem is read-only), logs unbuffered, the venv first on PATH.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/turbogate/bin:$PATH \
    TURBOGATE_CONFIG=/etc/turbogate/gateway.yaml
RUN groupadd --system --gid 10001 turbogate \
 && useradd --system --uid 10001 --gid turbogate --no-create-home --shell /usr/sbin/nologin turbogate
COPY --from=build /opt/turbogate /opt/turbogate
# The config is a mounted file (ConfigMap); engine API keys come from the environment (Secret),
# named by each replica's api_key_env.  Run with --read-only; nothing is written at run time.
VOLUME ["/etc/turbogate"]
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request as u; sys.exit(u.urlopen('http://127.0.0.1:8080/health', timeout=2).status != 200)"]
ENTRYPOINT ["turbogate", "serve"]
CMD ["--config", "/etc/turbogate/gateway.yaml", "--host", "0.0.0.0", "--port", "8080", "--log-level", "info"]
