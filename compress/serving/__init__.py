"""``bert-compress serve``: an artifact behind an HTTP endpoint, with server-side dynamic batching.

:mod:`compress.serving.schemas` reads a request and writes the answer in the transformers pipeline's shape per
task, :mod:`compress.serving.batcher` groups concurrent requests into model batches, :mod:`compress.serving.metrics`
counts them for Prometheus, :mod:`compress.serving.app` is the Starlette application and
:mod:`compress.serving.server` runs it under uvicorn. None of them imports torch or transformers: an ONNX or
OpenVINO artifact serves from the slim install (requirements-serve.txt).
"""
