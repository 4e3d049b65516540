# The slim serving image of bert-compress: onnxruntime, tokenizers, numpy and the HTTP server, no torch
# (requirements-serve.txt). It serves ONNX artifacts (and OpenVINO ones with openvino added); docs/serving.md.
#   docker build -t bert-compress-serve .
#   docker run --rm -p 127.0.0.1:8000:8000 -v "$PWD/runs/onnx-int8:/model:ro" bert-compress-serve
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
WORKDIR /src
COPY requirements-serve.txt .
RUN pip install --no-cache-dir -r requirements-serve.txt
COPY pyproject.toml README.md ./
COPY compress compress
COPY students students
COPY benchmarks benchmarks
RUN pip install --no-cache-dir --no-deps . && rm -rf /src

USER nobody
WORKDIR /tmp
EXPOSE 8000
# Inside the container the server listens on every interface of the container's own network; publish the port
# on the host's loopback (-p 127.0.0.1:8000:8000) unless it is meant to be reached from elsewhere.
ENTRYPOINT ["bert-compress", "serve", "/model", "--host", "0.0.0.0", "--port", "8000"]
CMD []
