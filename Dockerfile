# The gateway as a container: slim Python, non-root, config and data as volumes.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GATEWAY_SERVER__DATA_DIR=/data \
    GATEWAY_SERVER__LOG_FORMAT=json

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY config/gateway.toml /etc/gateway/gateway.toml
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin gateway \
    && mkdir -p /data \
    && chown gateway /data

USER 10001
VOLUME ["/data", "/etc/gateway"]
# admin, kafka08, iggy, liftbridge, cursus, tank
EXPOSE 9644 9092 8090 9292 9000 11011
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9644/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["gateway", "serve"]
CMD ["--config", "/etc/gateway/gateway.toml"]
