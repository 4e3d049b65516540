"""Run one stage from its config: in this process, or in a fresh one from a config JSON file.

``run_stage(stage, config, out)`` is how a recipe calls the stages (their run functions are in
:mod:`compress.stages.registry`). The stages that time things (bench, optimize: ``Stage.timed``) run in a
fresh interpreter (``python -m compress.run_stage bench CONFIG.json OUT``) so the training stages'
memory and thread pools do not colour their timings, and so OpenMP starts with idle threads
sleeping (``OMP_WAIT_POLICY=PASSIVE``, set before torch is imported). The child reads the same
config through ``from_dict``; its error message comes back through ``--error-file``. A stage the
child runs must be registered when :mod:`compress.stages.registry` is imported (a built-in one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from compress.core.errors import CompressError
from compress.stages.registry import find, get, names


def run_stage(stage: str, config: Any, out: str | os.PathLike) -> Any:
    """Run ``stage`` with its config object, writing its artifact (or results folder) at ``out``.

    Returns what the stage's run function returns (:attr:`compress.stages.registry.Stage.run`): the folder it
    wrote, or a check's exit code.
    """

    return get(stage).runner()(config, Path(out))


def run_in_fresh_process(stage: str, config: Any, out: str | os.PathLike, workdir: Path, debug: bool = False) -> None:
    """:func:`run_stage` in a new interpreter; a failure raises the child's own message."""
    import subprocess

    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / f"{stage}.config.json"
    error_file = workdir / f"{stage}.error.txt"
    config_file.write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    error_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "compress.run_stage", stage, str(config_file), str(out), "--error-file",
           str(error_file)] + (["--debug"] if debug else [])
    code = subprocess.run(cmd, env=child_env()).returncode
    if code != 0:
        message = error_file.read_text(encoding="utf-8").strip() if error_file.exists() else ""
        if code == 130:
            raise KeyboardInterrupt
        raise CompressError(message or f"stage {stage} failed in its own process (exit code {code}); its output "
                                       "is above")


def child_env() -> dict[str, str]:
    """This process's environment, with the modules of the tasks registered from outside ``compress.tasks`` added
    to :data:`compress.tasks.TASK_MODULES_ENV`, so the child knows every task the parent does."""
    from compress.tasks import TASK_MODULES_ENV, get_task, task_names

    env = dict(os.environ)
    named = [m for m in env.get(TASK_MODULES_ENV, "").split(",") if m]
    for name in task_names():
        package = get_task(name).package
        if package and not package.startswith("compress.tasks.") and package not in named:
            named.append(package)
    if named:
        env[TASK_MODULES_ENV] = ",".join(named)
    return env


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compress.run_stage",
                                     description="Run one bert-compress stage from a config JSON file.")
    parser.add_argument("stage", help=f"one of {', '.join(names())}")
    parser.add_argument("config", help="the stage's config as JSON (its to_dict(), as in compress.json)")
    parser.add_argument("out", help="artifact (or results) folder to write")
    parser.add_argument("--error-file", default=None, help="write the error message here instead of printing it")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    a = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    stage = find(a.stage)
    if stage is not None and stage.timed:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP; see compress.cli.main

    try:
        if stage is None:
            raise CompressError(f"no stage called {a.stage!r} runs from a config file; stages: {', '.join(names())}")
        try:
            data = json.loads(Path(a.config).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CompressError(f"{a.config}: cannot read the config ({exc})") from exc
        config = stage.config.from_dict(data, where=a.config)
        result = run_stage(a.stage, config, a.out)
    except CompressError as exc:
        if a.debug:
            raise
        if a.error_file:
            Path(a.error_file).write_text(str(exc), encoding="utf-8")
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    # A check (the gate) returns its exit code; a stage that wrote its folder succeeded.
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


if __name__ == "__main__":
    raise SystemExit(main())
