# enrich-proxy: build with `docker build -t enrich-proxy .`, run with
#   docker run -p 8000:8000 -v $PWD/config.yaml:/etc/enrich-proxy/config.yaml:ro \
#     -v enrich-data:/data enrich-proxy
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PROXY__SERVER__HOST=0.0.0.0 \
    PROXY__SERVER__PORT=8000 \
    PROXY__SERVER__DATA_DIR=/data \
    PROXY__SERVER__LOG_FORMAT=json

# Tesseract's language data for OCR of scanned pages (documents.ocr); add tesseract-ocr-<lang>
# for other languages.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-eng \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin proxy \
    && mkdir -p /data /etc/enrich-proxy \
    && chown proxy /data
COPY config.example.yaml /etc/enrich-proxy/config.yaml

USER proxy
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"
ENTRYPOINT ["python", "-m", "proxy", "--config", "/etc/enrich-proxy/config.yaml"]
