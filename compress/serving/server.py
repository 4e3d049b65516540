"""Run the application under uvicorn: ``bert-compress serve MODEL``.

uvicorn does the HTTP and the graceful stop: on SIGTERM (or Ctrl-C) it closes the listening socket, lets the
requests in flight finish (up to the request timeout), then runs the application's shutdown, which drains the
batcher. It re-raises the signal it caught once it has stopped; the handler installed here makes that a no-op,
so a stop that finished its work exits 0 instead of dying of the signal.

With ``--workers N`` uvicorn starts N processes, each loading the model (N copies in memory) and batching on its
own; they find their settings in :data:`SETTINGS_ENV`. Each warms up before it accepts a connection (they share
one listening socket, so a cold worker would otherwise take requests its ready siblings could answer).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path
from typing import Any

from compress.core.errors import CompressError
from compress.runtime.predictor import Predictor
from compress.serving.app import create_app
from compress.serving.schemas import check_task
from compress.serving.settings import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_WORKERS, ServeSettings

#: Where ``--workers N`` passes the model and settings to its worker processes (each builds its own app).
SETTINGS_ENV = "BERT_COMPRESS_SERVE"


def _loader(model: str, threads: int | None, max_length: int | None):
    # spinning=False: the runtime's idle threads sleep between batches instead of busy-waiting on the cores the event
    # loop needs to read the next requests (on 2 cores, spinning showed as a longer latency tail at half load).
    return lambda: Predictor.load(model, threads=threads, max_length=max_length, spinning=False)


def worker_app():
    """The application of one ``--workers N`` process, from :data:`SETTINGS_ENV` (a uvicorn factory)."""
    spec = json.loads(os.environ[SETTINGS_ENV])
    return create_app(_loader(spec["model"], spec["threads"], spec["max_length"]), ServeSettings(**spec["settings"]),
                      warm_before_listening=True)


def serve(model: str, settings: ServeSettings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          workers: int = DEFAULT_WORKERS,
          threads: int | None = None, max_length: int | None = None, access_log: bool = False,
          log_level: str = "info") -> int:
    """Serve ``model`` until SIGTERM/SIGINT; 0 once the requests in flight are answered."""
    import uvicorn

    settings.check()
    if not Path(model).is_dir():
        raise CompressError(f"serve {model}: no such folder. Give an artifact folder (from export, quantize or "
                            "optimize; any folder bert-compress predict takes).")
    if not isinstance(workers, int) or workers < 1:
        raise CompressError(f"--workers must be a whole number of at least 1, got {workers!r}.")
    if not 0 <= port <= 65535:
        raise CompressError(f"--port must be 0 to 65535, got {port}.")
    # Opened here once whatever the worker count: a bad artifact is a one-line error before anything listens.
    predictor = _loader(model, threads, max_length)()
    check_task(predictor.task, model)
    common: dict[str, Any] = dict(host=host, port=port, lifespan="on", access_log=access_log, log_level=log_level,
                                  timeout_graceful_shutdown=int(settings.request_timeout_s) + 5)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)  # uvicorn re-raises the stop signal after its graceful stop
    if workers == 1:
        config = uvicorn.Config(create_app(lambda: predictor, settings), **common)
    else:
        del predictor
        os.environ[SETTINGS_ENV] = json.dumps({"model": str(model), "threads": threads, "max_length": max_length,
                                               "settings": dataclasses.asdict(settings)})
        config = uvicorn.Config("compress.serving.server:worker_app", factory=True, workers=workers, **common)
    if workers > 1:
        from uvicorn.supervisors import Multiprocess

        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return 0
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 1  # not started: uvicorn has logged why (the port taken, a failed startup)
