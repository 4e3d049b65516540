"""The Starlette application: ``POST /predict``, ``GET /health``, ``/ready``, ``/metrics``, ``/openapi.json``.

``/health`` answers as soon as the process listens (an orchestrator's liveness probe); ``/ready`` only once the
model is loaded and has run a warm-up batch at batch 1 and at ``--max-batch`` (the first call of a runtime
allocates and plans, and should not land on a user's request), and ``/predict`` answers 503 until then.
Every bad request is answered with a status and ``{"error", "field"}``, never a crash: the body is read up to the
limit (413 past it), decoded as UTF-8 (400), parsed as JSON (400) and checked by :mod:`compress.serving.schemas`
(422, 413 for too many inputs). A caller that disconnects or outlives ``--request-timeout`` (504) is taken out of
the queue, and the server goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any, AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from compress.core.errors import CompressError, describe
from compress.serving.batcher import Batcher, Job, QueueFull
from compress.serving.metrics import Metrics
from compress.serving.schemas import BadInput, format_results, openapi, parse_request, predict_batch, warm_up_request
from compress.serving.settings import ServeSettings

log = logging.getLogger("uvicorn.error")  # uvicorn configures this one: its lines land in the server log


def _error(status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


class Service:
    """The model, its batcher and its metrics, shared by the routes of one application."""

    def __init__(self, load: Callable[[], Any], settings: ServeSettings, warm_before_listening: bool = False):
        self.load = load
        self.warm_before_listening = warm_before_listening
        self.settings = settings
        self.metrics = Metrics()
        self.predictor: Any = None
        self.batcher: Batcher | None = None
        self.ready = False
        self.schema: dict[str, Any] = {}

    def _run(self, key: tuple[Any, ...], inputs: list[Any]) -> list[Any]:
        return predict_batch(self.predictor, key, inputs, self.settings.max_batch)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        s = self.settings
        self.batcher = Batcher(self._run, s.max_batch, s.max_wait_ms / 1000, s.queue_size, self.metrics)
        self.predictor = await self.batcher.call(self.load)  # a bad artifact fails startup, before it listens
        self.schema = openapi(self.predictor.task, self.predictor.label_names, s.max_batch)
        self.batcher.start()
        warming = None
        if self.warm_before_listening:  # uvicorn accepts only after startup: no request meets this process cold
            await self._warm_up()
        else:
            warming = asyncio.get_running_loop().create_task(self._warm_up())
        try:
            yield
        finally:
            if warming is not None:
                await warming
            await self.batcher.close()  # after uvicorn has let the requests in flight finish: runs what is queued

    async def _warm_up(self) -> None:
        warm = warm_up_request(self.predictor.task, self.settings.aggregation)
        try:
            for n in sorted({1, self.settings.max_batch}):
                await self.batcher.call(lambda n=n: self._run(warm.key, warm.inputs * n))
        except Exception as exc:  # noqa: BLE001 - the server stays up, not ready, and says why
            log.error("warm-up failed, so /ready stays 503: %s", describe(exc), exc_info=exc)
            return
        self.ready = True
        log.info("ready: %s (%s, %s)", self.predictor.path, self.predictor.kind, self.predictor.task)

    async def predict(self, request: Request) -> Response:
        started = time.perf_counter()
        response, reason = await self._predict(request, started)
        self.metrics.answered(response.status_code, time.perf_counter() - started, reason)
        return response

    async def _predict(self, request: Request, started: float) -> tuple[Response, str | None]:
        s = self.settings
        if not self.ready:
            return _error(503, "the model is loading or warming up; retry shortly", headers={"Retry-After": "1"}), \
                "not_ready"
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > s.max_body_bytes:
            return _error(413, f"the body is {declared} bytes, over this server's --max-body-bytes of "
                               f"{s.max_body_bytes}", "body"), "too_large"
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > s.max_body_bytes:  # a chunked body has no Content-Length: stop reading it here
                    return _error(413, f"the body is over this server's --max-body-bytes of {s.max_body_bytes}",
                                  "body"), "too_large"
        except ClientDisconnect:  # gone before its body was sent
            return Response(status_code=499), "disconnected"
        try:
            data = json.loads(bytes(body).decode("utf-8"))
        except UnicodeDecodeError as exc:
            return _error(400, f"the body is not UTF-8 (byte {exc.start} is {body[exc.start]:#04x}); send UTF-8 "
                               "JSON", "body"), "bad_request"
        except ValueError as exc:
            return _error(400, f"the body is not JSON ({exc}); send {{\"inputs\": ...}}", "body"), "bad_request"
        except RecursionError:  # json's limit on nesting: "[[[[..." deeper than any request needs
            return _error(400, "the body nests deeper than JSON can be read here; send {\"inputs\": ...}",
                          "body"), "bad_request"
        try:
            parsed = parse_request(self.predictor.task, data, s.max_batch, s.aggregation)
        except BadInput as exc:
            return _error(exc.status, exc.message, exc.field), "bad_input"
        try:
            job = self.batcher.submit(parsed)
        except QueueFull as exc:
            return _error(503, f"busy: {exc}; retry after the Retry-After seconds", None,
                          {"Retry-After": "1"}), "queue_full"
        outcome = await self._wait(request, job, s.request_timeout_s - (time.perf_counter() - started))
        if outcome == "disconnected":
            return Response(status_code=499), "disconnected"  # nobody reads it: counted, not sent
        if outcome == "timeout":
            return _error(504, f"not answered within --request-timeout {s.request_timeout_s:g} s", None), "timeout"
        exc = job.future.exception()
        if isinstance(exc, CompressError):
            return _error(422, str(exc), "inputs"), "bad_input"
        if exc is not None:
            log.error("prediction failed: %s", describe(exc), exc_info=exc)
            return _error(500, f"the model failed on this request ({describe(exc)})", None), "model_error"
        result = format_results(self.predictor.task, parsed, job.future.result(), self.predictor.label_names)
        return JSONResponse(result, headers={"X-Batch-Size": str(job.batch_size)}), None

    async def _wait(self, request: Request, job: Job, timeout: float) -> str:
        """``done``, ``timeout`` or ``disconnected``; a request that will not be answered leaves the queue."""
        gone = asyncio.ensure_future(_disconnect(request))
        try:
            done, _ = await asyncio.wait({job.future, gone}, timeout=max(timeout, 0),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if job.future in done:
            return "done"
        self.batcher.withdraw(job)
        return "disconnected" if gone in done else "timeout"

    async def ready_route(self, request: Request) -> Response:
        if self.ready:
            return PlainTextResponse("ready\n")
        return PlainTextResponse("warming up\n", status_code=503, headers={"Retry-After": "1"})

    async def metrics_route(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=self.metrics.content_type)

    async def openapi_route(self, request: Request) -> Response:
        return JSONResponse(self.schema)


async def _disconnect(request: Request) -> None:
    """Return when the client has gone (uvicorn delivers ``http.disconnect`` once the body is read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _health(request: Request) -> Response:
    return PlainTextResponse("ok\n")


def create_app(load: Callable[[], Any], settings: ServeSettings, warm_before_listening: bool = False) -> Starlette:
    """The application serving the Predictor ``load()`` returns (called once, at startup, on the model thread).

    ``warm_before_listening``: warm up during startup, so the process accepts no connection before it is ready. The
    ``--workers N`` processes share one listening socket, and a request taken by a worker still warming up would be
    answered 503 while its siblings were ready; one process alone listens first, so ``/health`` answers at once.
    """
    service = Service(load, settings.check(), warm_before_listening)
    routes = [Route("/predict", service.predict, methods=["POST"]), Route("/health", _health, methods=["GET"]),
              Route("/ready", service.ready_route, methods=["GET"]),
              Route("/metrics", service.metrics_route, methods=["GET"]),
              Route("/openapi.json", service.openapi_route, methods=["GET"])]
    app = Starlette(routes=routes, lifespan=service.lifespan)
    app.state.service = service
    return app
