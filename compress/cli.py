"""The ``bert-compress`` command: argument parsing only; every stage lives in its own module.

Errors in the user's input surface as one line (``error: ...``) and exit code 2; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from compress.core.errors import CompressError
from compress.stages.losses import names as loss_names
from compress.tasks.tables import BUILTIN_UNLABELED
from benchmarks.report import demo_table
from compress.core.artifact import check_out_folder, read_meta
from compress.core.assets import cache_dir
from compress.config import (TRAIN_FLAGS, SELECTION_FLAGS, BenchConfig, DATA_KEYS, DataOptions, DistillConfig, ExportConfig,
                             OptimizeConfig, PretrainConfig, PruneConfig, QuantizeConfig, TeacherConfig, flag_options,
                             setting)
from compress.core.device import check_device_spec
from compress.stages.optimize import format_decision
from compress.budget.duration import parse_budget
from compress.pipeline import load_recipe, run_recipe
from compress.core.progress import configure as configure_progress
from compress.runtime.predictor import Predictor
from compress.serving.settings import (DEFAULT_HOST as SERVE_HOST, DEFAULT_PORT as SERVE_PORT,
                                      DEFAULT_WORKERS as SERVE_WORKERS, ServeSettings)
from compress.stages.registry import all_stages, find, get
from compress.summary import format_table, summary_rows
from compress.tasks.token_classification.decoding import AGGREGATIONS, DEFAULT_AGGREGATION
from compress.tasks.question_answering.features import DEFAULT_MAX_ANSWER_LENGTH, DEFAULT_N_BEST
from compress.tasks.registry import get_task, task_names
from compress.core.windows import POOLINGS
from students.factory import describe_presets

if TYPE_CHECKING:
    from compress.stages.registry import Stage


def _scalar_type(hint: Any) -> type | None:
    """``int`` or ``float`` for a field typed so (or ``X | None``), else ``None`` (argparse keeps the string)."""
    import typing

    kinds = [h for h in (typing.get_args(hint) or (hint,)) if h is not type(None)]
    return kinds[0] if len(kinds) == 1 and kinds[0] in (int, float) else None


def _shown(value: Any) -> str:
    """A default as the help shows it: ``5e-05``, ``1,32``, ``test``."""
    if isinstance(value, (list, tuple)):
        return ",".join(_shown(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _builtin_corpora() -> str:
    """The built-in unlabelled corpora and what each is, for ``--unlabeled``'s help (one list: compress.tasks.tables)."""
    return "; ".join(f"{name} ({what})" for name, what in BUILTIN_UNLABELED.items())


#: ``--stride``'s other name in every stage that reads windows: run_qa.py's for a reader's passage overlap.
STRIDE_ALIASES = ("--doc-stride",)


def _option(g: Any, cls: type, key: str, help: str | None = None, aliases: tuple[str, ...] = (), **extra: Any) -> None:
    """``--KEY`` made from config ``cls``'s setting ``key`` (:func:`compress.config.setting`): its default, type
    and choices are the field's, so each lives in one place; ``help`` says what the flag does (default: the
    field's own ``help``, declared with the settings several commands share) and the default is appended to it
    (unless the help explains the default itself)."""

    f, default, hint = setting(cls, key)
    help = help or f.metadata.get("help")
    if not help:
        raise TypeError(f"--{key.replace('_', '-')}: give its help here or in {cls.__name__}'s field metadata")
    kwargs: dict[str, Any] = {"default": default}
    if "choices" in f.metadata:
        kwargs["choices"] = tuple(f.metadata["choices"])
    if isinstance(default, bool):
        kwargs["action"] = argparse.BooleanOptionalAction if default else "store_true"
    elif _scalar_type(hint) is not None:
        kwargs["type"] = _scalar_type(hint)
    kwargs.update(extra)
    if default is not None and "(default" not in help and kwargs.get("action") != "store_true":
        help = f"{help} (default {'on' if default is True else 'off' if default is False else _shown(default)})"
    g.add_argument("--" + key.replace("_", "-"), *aliases, help=help, **kwargs)


def _add_data_flags(p: argparse.ArgumentParser, required: bool = True) -> None:
    g = p.add_argument_group("data")
    _option(g, DataOptions, "data", required=required)
    for key in DATA_KEYS[1:]:  # after --data itself
        _option(g, DataOptions, key)


def _add_train_flags(p: argparse.ArgumentParser, cls: type) -> None:
    """The optimiser flags of a training stage, with that stage's defaults (``cls``: its config)."""
    g = p.add_argument_group("training")
    for key in (*TRAIN_FLAGS, "max_length", "resume", "allow_pickle"):  # TRAIN_FLAGS: the one list of them
        _option(g, cls, key)
    _option(g, cls, "stride", aliases=STRIDE_ALIASES)
    for key in SELECTION_FLAGS:
        if key in cls.FLAT:  # teacher and distill, which can pick among their epochs
            _option(g, cls, key)
    if "pooling" in {f.name for f in dataclasses.fields(cls)}:  # the stages that train a classifier
        _option(g, cls, "pooling")


def _add_precision_flag(p: argparse.ArgumentParser, what: str, bf16_alias: bool = False) -> None:
    """``--precision``, made from the config field (compress.config._precision: one default, choices, help);
    ``--bf16`` (the flag before it) stays as ``--precision bf16`` where a command had it."""

    options = flag_options(TeacherConfig, "precision")
    p.add_argument("--precision", default=options["default"], choices=options["choices"],
                   help=f"precision of {what}: {options['help']}")
    if bf16_alias:
        p.add_argument("--bf16", dest="precision", action="store_const", const="bf16",
                       help="same as --precision bf16 (warns where the CPU would emulate it); prefer --precision auto")


def _add_device_flag(p: argparse.ArgumentParser, what: str = "the model") -> None:
    _option(p, TeacherConfig, "device", f"where {what} runs: auto (a CUDA GPU when torch sees one, else the CPU), cpu, "
            "cuda or cuda:N")


def _data_options(a: argparse.Namespace):
    """The ``--data`` family of flags as a :class:`compress.config.DataOptions` (``None`` without ``--data``)."""

    if getattr(a, "data", None) is None:
        return None
    return DataOptions.from_dict({k: getattr(a, k) for k in DATA_KEYS}, where="data")


def stage_config(stage: str, a: argparse.Namespace, **wired: Any):
    """The validated config a parsed command line describes: its flags are the config's flat keys."""

    cls = get(stage).config
    known = set(cls.known_keys())
    flags = {k: v for k, v in vars(a).items() if k in known}
    if "data" in {f.name for f in dataclasses.fields(cls)}:
        flags["data"] = _data_options(a)
    flags.update(wired)
    return cls.from_dict(flags, where=stage)


def cmd_stage(a: argparse.Namespace) -> int:
    """Any stage's command (``a.command`` is its name in :mod:`compress.stages.registry`): build its config from the
    flags, run it, print what it wrote. A check (the gate) exits with its own code."""

    stage = get(a.command)
    out = getattr(a, "out", None)
    if out:  # a path that cannot be a folder fails now, not after the training or the measuring
        check_out_folder(out)
    cache_dir()  # and so does a cache folder that cannot be made (BERT_COMPRESS_CACHE)
    result = stage.runner()(stage_config(a.command, a), out)
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    if stage.announce:
        print(f"{stage.announce}: {result}")
    return 0


def _setting(text: str) -> Any:
    """A flag value of a registered stage's generated command, read as YAML (``3``, ``0.5``, ``[1, 2]``,
    ``name``) like the same key in a recipe; the config's ``from_dict`` checks its type."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _setting_hint(cls: type, key: str) -> Any:
    """The type of a config's flat key (a nested one through ``FLAT``)."""
    from typing import get_type_hints

    parent, sub = cls.FLAT.get(key, (None, key))
    if parent is None:
        return get_type_hints(cls)[key]
    nested = cls._nested_class(get_type_hints(cls)[parent])
    return get_type_hints(nested)[sub]


def add_stage_command(sub: "argparse._SubParsersAction", stage: "Stage") -> argparse.ArgumentParser:
    """A command for a registered stage without hand-written flags: ``--out`` and one flag per config key.

    Booleans are ``--x/--no-x``; other values are read as in a recipe (:func:`_setting`); a flag not
    given keeps the config's default. A ``data`` setting gets the ``--data`` family of flags.
    """

    cls = stage.config
    doc = (cls.__doc__ or "").strip().splitlines()
    p = sub.add_parser(stage.name, help=doc[0] if doc else f"the {stage.name} stage")
    p.add_argument("--out", required=True, help="folder to write")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in cls.known_keys(hidden=DATA_KEYS):
        flag = "--" + key.replace("_", "-")
        # the field's own help where it declares one (the shared settings do), else the setting's name
        help = setting(cls, key)[0].metadata.get("help") or f"{cls.__name__}.{key}"
        if _setting_hint(cls, key) is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help)
        else:
            p.add_argument(flag, type=_setting, default=argparse.SUPPRESS, help=help)
    if "data" in fields:
        optional = fields["data"].default is None
        _add_data_flags(p, required=not optional)
        if optional:
            p.set_defaults(data=None)
    p.set_defaults(func=cmd_stage)
    return p


def cmd_students(a: argparse.Namespace) -> int:
    rows = describe_presets(num_labels=a.num_labels)
    print(f"{'preset':<18}{'layers':>7}{'hidden':>8}{'heads':>7}{'ffn':>7}{'params':>12}")
    for r in rows:
        print(f"{r['name']:<18}{r['layers']:>7}{r['hidden']:>8}{r['heads']:>7}{r['ffn']:>7}{r['parameters'] / 1e6:>11.1f}M")
    print("\nAny LAYERSxHIDDEN also works (e.g. 3x384): 12 heads when the width allows, FFN = 4 x hidden.")
    print("Parameter counts assume BERT's 30,522-token vocabulary, 512 positions and a 2-label head.")
    return 0


def _predict_texts(given: Sequence[str]) -> list[str]:
    """The texts ``predict`` labels: its arguments, and for ``-`` the lines of standard input (blank lines
    skipped), as Unix tools read ``-``. An empty argument is refused: a label for no text means nothing."""
    texts: list[str] = []
    for n, text in enumerate(given, 1):
        if text == "-":
            texts += [line.rstrip("\r\n") for line in sys.stdin if line.strip()]
        elif not text.strip():
            raise CompressError(f"predict: text {n} is empty; give the text to label (or - to read lines from "
                                "standard input).")
        else:
            texts.append(text)
    if not texts:
        raise CompressError("predict: give one or more texts to label, e.g. bert-compress predict --model DIR 'a text' "
                            "(or - to read lines from standard input).")
    return texts


def cmd_predict(a: argparse.Namespace) -> int:
    if a.format == "npy" and a.out is None:
        raise CompressError("--format npy writes one array to a file: give --out FILE.npy.")
    if a.format != "npy" and a.out is not None:
        raise CompressError(f"--out {a.out} is where --format npy writes the vectors; JSON lines go to standard output. "
                            "Add --format npy, or leave --out out.")
    predictor = Predictor.load(a.model, threads=a.threads, max_length=a.max_length, device=check_device_spec(a.device),
                               precision=a.precision, announce=True, stride=a.stride, pooling=a.pooling)
    if a.format == "npy":
        return _predict_npy(predictor, a)
    # the model's task reads its inputs from the flags and says what to print (compress.tasks.protocol.decoding)
    for line in predictor.decoding.predict_command(predictor, a, _predict_texts):
        print(line)
    return 0


def _predict_npy(predictor: Predictor, a: argparse.Namespace) -> int:
    """``predict --format npy --out FILE``: the ``(n, dim)`` float32 array of ``Predictor.encode`` (a model that gives
    no vector says so in one line), saved with ``numpy.save``."""
    import numpy as np

    vectors = predictor.encode(_predict_texts(a.texts), batch_size=a.batch_size)
    out = Path(a.out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, vectors)
    print(f"predict: {out} ({vectors.shape[0]} x {vectors.shape[1]} float32)", file=sys.stderr)
    return 0


def cmd_serve(a: argparse.Namespace) -> int:
    try:  # starlette and uvicorn: the serving install's, needed by this command only
        from compress.serving.server import serve
    except ImportError as exc:
        raise CompressError(f"serve needs starlette, uvicorn and prometheus-client ({exc}): pip install -r "
                            "requirements-serve.txt, or pip install 'bert-compress[serve]'.") from exc

    settings = ServeSettings(max_batch=a.max_batch, max_wait_ms=a.max_wait_ms, queue_size=a.queue_size,
                             request_timeout_s=a.request_timeout, max_body_bytes=a.max_body_bytes,
                             aggregation=a.aggregation)
    return serve(a.model, settings, host=a.host, port=a.port, workers=a.workers, threads=a.threads,
                 max_length=a.max_length, access_log=a.access_log)


def cmd_summary(a: argparse.Namespace) -> int:
    print(format_table(summary_rows(a.artifacts), markdown=a.markdown))
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    recipe = load_recipe(a.recipe, a.out, a.data)
    force = tuple(x.strip() for x in a.force.split(",") if x.strip()) if a.force else ()
    budget = a.budget if a.budget is not None else recipe.budget_s
    plan = None
    if budget is not None:
        from compress.budget.decide import decide  # measures with torch: only a budgeted run pays the import

        recipe, plan = decide(recipe, budget, replan=a.replan, strict=a.strict_budget)
        if a.plan_only:
            return 0
    elif a.replan or a.strict_budget or a.plan_only:
        raise CompressError(f"recipe {recipe.path} has no budget: give --budget 30m or budget: 30m in the recipe for "
                            "--replan, --strict-budget or --plan-only")
    status = run_recipe(recipe, force=force, debug=a.debug, budget_plan=plan)
    print("\nstage      status      seconds" + (" estimate" if plan else "") + "  output")
    for row in status:
        estimate = f" {row['estimate_s']:>8}" if plan else ""
        print(f"{row['stage']:<10} {row['status']:<11} {row['seconds']:>7}{estimate}  {row['output']}")
    if plan is not None:
        as_written = "it fit the budget" if plan.fits else "over the budget, with nothing elastic to scale"
        print("\n" + "\n".join(f"plan: {c.line()}" for c in plan.changes) if plan.changes else
              f"\nplan: the recipe ran as written ({as_written})")
    bench = next((c.output for c in recipe.calls if c.stage == "bench"), None)
    results = bench / "results.json" if bench else None
    if results and results.exists():
        import json

        print("\n" + demo_table(json.loads(results.read_text(encoding="utf-8"))))
        print(f"\nreport: {bench / 'report.md'} (plots beside it)")
    chosen = next((c.output for c in recipe.calls if c.stage == "optimize"), None)
    if chosen is not None and (chosen / "compress.json").exists():
        # Which runtime the recipe deploys on this machine, and why (measured here, by optimize).
        print(f"\ndeployed: {chosen} serves each batch size with the runtime optimize measured fastest here:")
        print(format_decision(read_meta(chosen)))
    # The gate's own code (1 failed, 4 inconclusive) is the run's, so CI sees what the gate decided.
    codes = [int(r["status"].rsplit("exit ", 1)[1].rstrip(")")) for r in status if "(exit " in r["status"]]
    return codes[0] if codes else 0


def _budget(text: str) -> float:
    """``--budget 30m`` -> seconds."""
    try:
        return parse_budget(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_list(text: str) -> list[int]:
    """``"1,8,32"`` -> ``[1, 8, 32]``, for --batch-sizes and --seq-lens."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers such as 1,8,32, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive whole numbers such as 1,8,32, got {text!r}")
    return values


def _seed_group(text: str) -> tuple[str, list[str]]:
    """``"student=runs/s0,runs/s1"`` -> ``("student", ["runs/s0", "runs/s1"])``, for --seeds."""
    name, sep, dirs = text.partition("=")
    members = [d for d in dirs.split(",") if d.strip()]
    if not sep or not name.strip() or len(members) < 2:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR,DIR[,DIR...] (two or more seeds of one recipe), got {text!r}")
    return name.strip(), members


def _add_teacher(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress teacher``."""
    p = sub.add_parser("teacher", help="fine-tune an encoder into the teacher: a classifier, a tagger or a QA reader, as the data says")
    p.add_argument("--model", required=True,
                   help="local model folder, a built-in (minilm, mpnet-base), or a Hugging Face Hub id (org/name)")
    p.add_argument("--revision", default=None, help="branch, tag or commit of a hub --model (default: main)")
    p.add_argument("--out", required=True, help="artifact folder to write")
    _option(p, TeacherConfig, "finetune", "auto (the default): fine-tune unless the model has a classifier head that "
            "beats chance on validation; yes; no", choices=("auto", "yes", "no"))
    _add_data_flags(p)
    _add_train_flags(p, TeacherConfig)
    _option(p.add_argument_group("fine-tuning"), TeacherConfig, "freeze_layers")
    _add_device_flag(p, "training")
    _add_precision_flag(p, "training and evaluation", bf16_alias=True)
    p.set_defaults(func=cmd_stage)


def _add_distill(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress distill``."""
    p = sub.add_parser("distill", help="distil a student from a teacher artifact")
    p.add_argument("--teacher", required=True,
                   help="teacher artifact folder (from `bert-compress teacher`), or a fine-tuned classifier's hub id")
    p.add_argument("--revision", default=None, help="branch, tag or commit of a hub --teacher (default: main)")
    p.add_argument("--allow-untrained-teacher", action="store_true",
                   help="distil even from a teacher no better than chance on validation (refused by default)")
    p.add_argument("--out", required=True, help="artifact folder to write")
    p.add_argument("--student", default=DistillConfig().student.shape, help="preset or LAYERSxHIDDEN (default "
                   f"{DistillConfig().student.shape})")
    _option(p, DistillConfig, "init", "random | teacher-layers | minilm | pretrained:PATH")
    g = p.add_argument_group("distillation")
    _option(g, DistillConfig, "temperature")
    _option(g, DistillConfig, "kd_loss", "logit loss; logit_mse compares centred logits, teacher_ce trains on the "
            "teacher's top class (both ignore --temperature)",
            choices=loss_names("soft"))
    _option(g, DistillConfig, "alpha_kd")
    _option(g, DistillConfig, "alpha_hard")
    _option(g, DistillConfig, "intermediate", "TinyBERT-style embedding, hidden-state and attention losses (default "
            "off: on the measured data they cost accuracy and 2.6x the time; docs/ablation.md)",
            action=argparse.BooleanOptionalAction)
    _option(g, DistillConfig, "alpha_embedding", "weight of the embedding loss")
    _option(g, DistillConfig, "alpha_hidden", "weight of the hidden-state loss")
    _option(g, DistillConfig, "alpha_attention", "weight of the attention loss")
    _option(g, DistillConfig, "layer_map", 'uniform, or STUDENT:TEACHER pairs such as "0:1,1:3,2:5"')
    _option(g, DistillConfig, "hidden_loss", "loss of the embedding and hidden-state terms: hidden_mse (TinyBERT), "
            "hidden_nmse (on standardised states, scale-free) or hidden_cosine")
    _option(g, DistillConfig, "projection_lr", "learning rate of the projections that bridge widths (default: --lr)")
    _option(g, DistillConfig, "losses", "the objective as loss terms LOSS[@SIGNAL][:WEIGHT],... e.g. "
            "'soft_ce:1,hard_ce:0.5,hidden_nmse@embeddings:1,hidden_nmse@hidden:1,attention_mse:1' (replaces "
            "--alpha-*, --kd-loss, --hidden-loss and --intermediate; signals: logits, labels, gold, embeddings, hidden, "
            "attention, pooled)")
    _option(g, DistillConfig, "schedule", "joint: all losses together; two-stage: intermediate first, then "
            "prediction layer")
    _option(g, DistillConfig, "stage1_epochs", "epochs of intermediate-only training (two-stage)")
    _option(g, DistillConfig, "gold_labels")
    _option(g, DistillConfig, "alpha_gold")
    _option(g, DistillConfig, "gold_scale")
    _option(g, DistillConfig, "alpha_pooled")
    _option(g, DistillConfig, "pooled_loss", choices=loss_names("vectors"))
    _option(g, DistillConfig, "ensemble")
    _option(g, DistillConfig, "average_tail")
    _option(g, DistillConfig, "entity_weight")
    _option(g, DistillConfig, "mention_variants")
    _option(g, DistillConfig, "mention_pool")
    _option(g, DistillConfig, "keep_checkpoints", "keep the Trainer checkpoints after success")
    _option(g, DistillConfig, "embedding_loss")
    _option(g, DistillConfig, "keep_projection")
    _add_distill_transfer_flags(p)
    _add_data_flags(p)
    _add_train_flags(p, DistillConfig)
    _add_device_flag(p, "training (student and teacher)")
    _add_precision_flag(p, "training and the teacher's soft labels", bf16_alias=True)
    p.set_defaults(func=cmd_stage)


def _add_distill_transfer_flags(p: argparse.ArgumentParser) -> None:
    """distill's transfer-data group: the rows the teacher labels besides --data (unlabelled text, augmentation,
    soft labels from a teacher copy)."""
    g = p.add_argument_group("transfer data (rows the teacher labels; no hard label)")
    _option(g, DistillConfig, "unlabeled", "unlabelled in-domain text: a .txt file (one text a line), a "
            "csv/tsv/jsonl/parquet file, or a built-in: " + _builtin_corpora() + "; for QA data, questions without "
            "answers: a QA source as --data takes it, or a table with question and context columns")
    _option(g, DistillConfig, "unlabeled_text_column", "text column of a --unlabeled table")
    _option(g, DistillConfig, "unlabeled_text_pair_column", "second text column of a --unlabeled table (sentence-pair "
            "tasks)")
    _option(g, DistillConfig, "unlabeled_weight", "weight of an unlabelled row's soft-label loss; labelled rows weigh 1")
    _option(g, DistillConfig, "unlabeled_limit", "use a seeded sample of at most this many unlabelled texts (quick runs)")
    _option(g, DistillConfig, "unlabeled_balance")
    _option(g, DistillConfig, "unlabeled_select")
    _option(g, DistillConfig, "augment", "N augmented variants per training example, TinyBERT-style, labelled by the "
            "teacher")
    _option(g, DistillConfig, "augment_ops", "comma list of augmentation operations: replace, mask, delete, swap")
    for name in ("soft_labels", "soft_labels_min_agreement"):  # made from the config fields (compress.stages.distill.teacher_copies)
        options = flag_options(DistillConfig, name)
        g.add_argument("--" + name.replace("_", "-"), type=type(options["default"]), **options)


def _add_pretrain(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress pretrain``."""
    p = sub.add_parser("pretrain", help="continue masked-LM training of an encoder on unlabelled in-domain text")
    p.add_argument("--model", required=True, help="local encoder folder, or a built-in: minilm, mpnet-base")
    p.add_argument("--unlabeled", required=True,
                   help="unlabelled text: a .txt file (one text a line), a csv/tsv/jsonl/parquet file, or a built-in: "
                        + _builtin_corpora())
    _option(p, PretrainConfig, "unlabeled_text_column", "text column of a --unlabeled table")
    p.add_argument("--out", required=True, help="artifact folder to write (a masked LM with its head)")
    _option(p, PretrainConfig, "task_text", "add the --data training texts (labels unused) to the corpus")
    _option(p, PretrainConfig, "mlm_probability", "share of words masked")
    _option(p, PretrainConfig, "whole_word", "mask every word piece of a chosen word together")
    _option(p, PretrainConfig, "eval_share", "share of the corpus held out to measure the masked-LM loss")
    _option(p, PretrainConfig, "corpus_limit", "a seeded sample of at most this many corpus texts")
    _option(p, PretrainConfig, "unlabeled_balance")
    _add_data_flags(p, required=False)
    _add_train_flags(p, PretrainConfig)
    _add_device_flag(p, "training")
    _add_precision_flag(p, "training and the held-out loss", bf16_alias=True)
    p.set_defaults(func=cmd_stage, data=None)


def _add_students(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress students``."""
    p = sub.add_parser("students", help="list the student presets with their shapes and parameter counts")
    p.add_argument("--num-labels", type=int, default=2, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_students)


def _add_export(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress export``."""
    p = sub.add_parser("export", help="export an fp32 classifier to ONNX, fuse it for ONNX Runtime, check parity")
    p.add_argument("--model", required=True, help="PyTorch fp32 model folder (teacher/distill artifact)")
    p.add_argument("--out", required=True, help="artifact folder to write")
    _option(p, ExportConfig, "opset", "ONNX opset")
    _option(p, ExportConfig, "optimize", "apply ONNX Runtime's transformer fusions")
    p.set_defaults(func=cmd_stage)


def _add_quantize(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress quantize``."""
    p = sub.add_parser("quantize", help="INT8 (ONNX Runtime or PyTorch) or bf16, checked against fp32 accuracy")
    p.add_argument("--model", required=True, help="PyTorch fp32 folder, or an onnx-fp32 artifact (ort-dynamic, ort-static)")
    p.add_argument("--out", required=True, help="artifact folder to write")
    _option(p, QuantizeConfig, "method", "ort-dynamic: ONNX Runtime dynamic INT8 (exports first if needed); "
            "torch-dynamic: PyTorch INT8 Linear; ort-static: ONNX Runtime static INT8 (QDQ, per-channel) calibrated on "
            "training texts of --data; torch-bf16: PyTorch with bfloat16 weights (fast on AMX / AVX-512 BF16 CPUs, "
            "GPUs); openvino-fp32 / openvino-int8: OpenVINO IR, INT8 by NNCF calibrated on training texts of --data "
            "(needs the openvino extra)")
    _option(p, QuantizeConfig, "max_accuracy_drop", "largest drop of the task's metric on validation (accuracy, "
            "entity F1, SQuAD F1; 0.01 = one point) accepted before fallbacks are tried")
    _option(p, QuantizeConfig, "max_type_f1_drop")
    per_channel_tasks = " and ".join(name for name in task_names() if get_task(name).int8_per_channel)
    _option(p, QuantizeConfig, "per_channel", "per-channel weight scales from the start (where ort-dynamic starts "
            f"anyway for {per_channel_tasks or 'no task'}, whose logits lost more to one scale per weight matrix)")
    _option(p, QuantizeConfig, "reduce_range", "7-bit weights (CPUs without VNNI; ONNX Runtime only)")
    _option(p, QuantizeConfig, "graph", "ONNX graph quantized: fused (ORT transformer fusions; ort-dynamic default) "
            "or unfused (plain MatMuls; ort-static default). Measure both: see bert-compress optimize")
    _option(p, QuantizeConfig, "op_types", "comma-separated ONNX operator types to quantize (ort-dynamic default: "
            "MatMul,Attention,Gather,EmbedLayerNormalization; ort-static: MatMul)")
    _option(p, QuantizeConfig, "calibration_size", "training texts that calibrate ort-static and openvino-int8")
    _add_data_flags(p, required=False)
    _add_device_flag(p, "the accuracy check")
    _add_precision_flag(p, "the accuracy check's PyTorch fp32 model")
    p.set_defaults(func=cmd_stage, data=None)


def _add_optimize(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress optimize``."""
    p = sub.add_parser("optimize", help="build every runtime of a model, measure them here, keep the fastest per batch size")
    p.add_argument("--model", required=True, help="PyTorch fp32 artifact (distill, prune or teacher output)")
    p.add_argument("--out", required=True, help="choice artifact folder to write (Predictor.load opens it)")
    _option(p, OptimizeConfig, "candidates", "comma-separated runtimes to build (default all): onnx-fp32, "
            "onnx-int8-fused, onnx-int8-fp32-embeddings, onnx-int8-unfused, onnx-static-unfused, onnx-static-fused, "
            "torch-bf16, torch-int8, openvino-fp32, openvino-int8 (the OpenVINO ones only where the openvino extra is "
            "installed)")
    p.add_argument("--artifacts", nargs="+", default=None, metavar="DIR",
                   help="choose among these existing artifacts of --model instead of building candidates")
    _option(p, OptimizeConfig, "batch_sizes", "comma-separated batch sizes to choose for", type=_int_list)
    _option(p, OptimizeConfig, "seq_len", "sequence length of the timed inputs")
    _option(p, OptimizeConfig, "lengths")
    _option(p, OptimizeConfig, "threads", "intra-op threads for every runtime (default: all CPUs)")
    _option(p, OptimizeConfig, "warmup", "untimed runs per candidate and batch size")
    _option(p, OptimizeConfig, "runs", "timed interleaved rounds per batch size")
    _option(p, OptimizeConfig, "max_accuracy_drop", "drop of the task's metric on validation (accuracy, entity F1, "
            "SQuAD F1) against the fp32 model beyond which a candidate is out")
    _option(p, OptimizeConfig, "max_type_f1_drop")
    _option(p, OptimizeConfig, "min_agreement", "also drop candidates whose answers agree with the fp32 model on less "
            "than this share (e.g. 0.98)")
    _option(p, OptimizeConfig, "calibration_size", "training texts that calibrate ort-static and openvino-int8")
    _add_data_flags(p)
    _add_device_flag(p, "every candidate")
    p.set_defaults(func=cmd_stage)


def _add_predict(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress predict``."""
    p = sub.add_parser("predict", help="label texts with any artifact (PyTorch or ONNX, fp32 or INT8)")
    p.add_argument("--model", required=True, help="artifact folder")
    p.add_argument("texts", nargs="*", help="texts to classify or tag (a reader takes --question and --context-file)")
    p.add_argument("--question", action="append", default=None,
                   help="a reader (question answering): a question about the passage; repeat for several")
    p.add_argument("--context-file", default=None,
                   help="a reader: the UTF-8 text file holding the passage the questions are about")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: the runtime's choice)")
    p.add_argument("--batch-size", type=int, default=32, help="texts per batch (default 32)")
    p.add_argument("--max-length", type=int, default=None,
                   help="window length in tokens; longer texts are read in overlapping windows (default: the artifact's)")
    p.add_argument("--stride", *STRIDE_ALIASES, dest="stride", type=int, default=None,
                   help="tokens two neighbouring windows share; a reader's passage overlap (--doc-stride) "
                        "(default: the artifact's, else a quarter of the window)")
    p.add_argument("--pooling", choices=POOLINGS, default=None,
                   help="how a long text's window logits become one: mean or max (default: the artifact's, else mean)")
    _add_device_flag(p, "the artifact (ONNX: CUDAExecutionProvider when onnxruntime-gpu is installed)")
    _add_precision_flag(p, "a PyTorch fp32 artifact (other kinds keep their own)")
    p.add_argument("--aggregation", choices=AGGREGATIONS, default=DEFAULT_AGGREGATION,
                   help="a tagger: how a word's sub-tokens give its tag (default first, as it was trained)")
    p.add_argument("--word-tags", action="store_true", help="a tagger: print every word's tag too")
    p.add_argument("--format", choices=("jsonl", "npy"), default=None,
                   help="jsonl: one JSON line per text on standard output (default); npy: a sentence encoder's "
                        "(n, dim) float32 vectors written to --out")
    p.add_argument("--out", default=None, help="with --format npy: the .npy file to write")
    p.add_argument("--n-best", type=int, default=DEFAULT_N_BEST,
                   help=f"a reader: start and end candidates paired per window (default {DEFAULT_N_BEST})")
    p.add_argument("--max-answer-length", type=int, default=DEFAULT_MAX_ANSWER_LENGTH,
                   help=f"a reader: the longest answer in tokens (default {DEFAULT_MAX_ANSWER_LENGTH})")
    p.add_argument("--null-threshold", type=float, default=None,
                   help="a SQuAD 2.0 reader: answer nothing when the null score beats the best span by more than this "
                        "(default: the one chosen on validation, recorded in the artifact; else 0.0)")
    p.set_defaults(func=cmd_predict)


def _add_serve(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress serve``."""
    p = sub.add_parser("serve", help="serve an artifact over HTTP with dynamic batching (docs/serving.md)")
    serving = ServeSettings()
    p.add_argument("model", help="artifact folder (ONNX and OpenVINO serve from the slim install, without torch)")
    p.add_argument("--host", default=SERVE_HOST, help=f"address to bind (default {SERVE_HOST}: this machine only)")
    p.add_argument("--port", type=int, default=SERVE_PORT, help=f"port (default {SERVE_PORT}; 0: any free one)")
    p.add_argument("--workers", type=int, default=SERVE_WORKERS,
                   help=f"processes, each with its own model copy (default {SERVE_WORKERS})")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads per worker (default: the runtime's)")
    p.add_argument("--max-length", type=int, default=None, help="window length in tokens (default: the artifact's)")
    p.add_argument("--max-batch", type=int, default=serving.max_batch,
                   help=f"inputs in one model batch, and the most one request may send (default {serving.max_batch})")
    p.add_argument("--max-wait-ms", type=float, default=serving.max_wait_ms,
                   help=f"how long the oldest request waits for a batch to fill (default {serving.max_wait_ms:g})")
    p.add_argument("--queue-size", type=int, default=serving.queue_size,
                   help=f"inputs waiting at most; then 503 (default {serving.queue_size})")
    p.add_argument("--request-timeout", type=float, default=serving.request_timeout_s,
                   help=f"seconds to answer a request, else 504 (default {serving.request_timeout_s:g})")
    p.add_argument("--max-body-bytes", type=int, default=serving.max_body_bytes,
                   help=f"request body limit; then 413 (default {serving.max_body_bytes})")
    p.add_argument("--aggregation", choices=AGGREGATIONS, default=serving.aggregation,
                   help=f"a tagger's default aggregation_strategy (default {serving.aggregation})")
    p.add_argument("--access-log", action="store_true", help="log every request (off: it costs throughput)")
    p.set_defaults(func=cmd_serve)


def _add_run(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress run``."""
    p = sub.add_parser("run", help="run the stages a recipe (YAML) names, skipping finished ones")
    p.add_argument("recipe", help="recipe file, e.g. recipes/default.yaml")
    p.add_argument("--out", default=None, help="output folder (overrides the recipe's out:)")
    p.add_argument("--data", default=None, help="data name or path (overrides the recipe's data:, e.g. your own "
                   "CoNLL file with recipes/ner.yaml)")
    p.add_argument("--force", default=None, help="comma-separated stages to run again even if up to date")
    p.add_argument("--budget", type=_budget, default=None,
                   help="fit the run in this time (30m, 1h, 90s; overrides the recipe's budget:): this machine is "
                        "measured first and the recipe's elastic: knobs are scaled to fit (docs/guide.md, Budgets)")
    p.add_argument("--replan", action="store_true", help="measure and plan again instead of reusing the run's plan")
    p.add_argument("--strict-budget", action="store_true",
                   help="stop (exit 2) when even the smallest plan is estimated over the budget")
    p.add_argument("--plan-only", action="store_true", help="measure, print and record the plan, then stop")
    p.set_defaults(func=cmd_run)


def _add_bench(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress bench``."""
    p = sub.add_parser("bench", help="measure latency, throughput, memory, size and accuracy of artifacts side by side")
    p.add_argument("artifacts", nargs="+", metavar="ARTIFACT", help="artifact folders to measure (any kind)")
    p.add_argument("--reference", required=True, help="artifact the others are compared with (speedup, agreement)")
    p.add_argument("--out", required=True, help="folder for results.json, report.md and the plots")
    _option(p, BenchConfig, "split", "data split the quality is measured on")
    p.add_argument("--batch-sizes", type=_int_list, default=None, help="comma-separated (default 1,8,32; quick: 1)")
    p.add_argument("--seq-lens", type=_int_list, default=None,
                   help="comma-separated sequence lengths in tokens (default 32,128; quick: 32)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads for every runtime (default: all CPUs)")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs per artifact and config (default 50; quick: 3)")
    p.add_argument("--runs", type=int, default=None, help="timed runs per artifact and config (default 300; quick: 10)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: warmup 3, runs 10, batch 1, seq 32, 64 examples (unless given explicitly)")
    _option(p, BenchConfig, "memory", "measure peak memory of each artifact in a separate process")
    p.add_argument("--history", default=None, metavar="FILE.jsonl",
                   help="append this run's summary (speedups, accuracy, agreement, machine) as one line to this file")
    p.add_argument("--seeds", type=_seed_group, action="append", default=None, metavar="NAME=DIR,DIR,...",
                   help="students of one recipe trained with different seeds: gated as NAME on their mean (repeatable)")
    p.add_argument("--traffic", default=None, metavar="SPLIT",
                   help="also replay the texts of SPLIT (e.g. test) at their real lengths: batch-1 latency per request "
                        "(no padding) and throughput with the Predictor's length-sorted batching")
    p.add_argument("--traffic-limit", type=int, default=None, help="replay only the first N texts of --traffic")
    p.add_argument("--traffic-file", default=None, metavar="FILE",
                   help="unlabelled texts of your own traffic (.txt one a line, or a csv/jsonl/parquet text column): "
                        "every artifact's agreement with --reference there, its interval and the most confident "
                        "disagreements (gate rule min_traffic_agreement)")
    p.add_argument("--load-clients", type=_int_list, default=None, metavar="N,N",
                   help="load mode: N client threads calling one Predictor at once, per N (e.g. 1,2,4); every answer "
                        "checked against the single-threaded one")
    _option(p, BenchConfig, "load_requests", "requests per client count in load mode")
    _option(p, BenchConfig, "stride", aliases=STRIDE_ALIASES)
    _option(p, BenchConfig, "pooling")
    _add_data_flags(p)
    _add_device_flag(p, "every artifact")
    _add_precision_flag(p, "the PyTorch fp32 artifacts (other kinds keep their own)")
    p.set_defaults(func=cmd_stage)


def _add_gate(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress gate``."""
    p = sub.add_parser("gate", help="check benchmark results against thresholds: exit 1 on a failed rule (CI)")
    p.add_argument("results", help="results.json written by bert-compress bench")
    p.add_argument("--rules", required=True, help="gates TOML file (see docs/ci.md)")
    p.add_argument("--baseline", default=None, help="an older results.json, for max_regression")
    p.add_argument("--junit", default=None, help="write JUnit XML here (one testcase per artifact and rule)")
    p.add_argument("--on-inconclusive", choices=("pass", "fail"), default=None,
                   help="count a rule whose interval straddles its limit as pass (exit 0) or fail (exit 1); "
                        "default: exit code 4")
    p.add_argument("--history", default=None, metavar="FILE.jsonl",
                   help="also flag results unlike the last --window comparable runs of this bench --history file")
    p.add_argument("--window", type=int, default=None, help="runs of the history to compare with (default 20)")
    p.add_argument("--history-threshold", type=float, default=None,
                   help="flag a value this many standard deviations below the window's mean (default 3)")
    p.add_argument("--history-test", choices=("z", "t"), default=None,
                   help="z: z-score; t: the same false-alarm rate under Student's t for the window size (default t)")
    p.add_argument("--allow-device-mismatch", action="store_true",
                   help="compare with a --baseline measured on another device (refused by default)")
    p.set_defaults(func=cmd_stage)


def _add_prune(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress prune``."""
    p = sub.add_parser("prune", help="remove attention heads and FFN neurons (torch-pruning), recover by distillation")
    p.add_argument("--model", required=True, help="PyTorch fp32 classifier artifact (teacher, distill or prune)")
    p.add_argument("--out", required=True, help="artifact folder to write")
    _option(p, PruneConfig, "heads", "share of attention heads to remove, in [0, 1)")
    _option(p, PruneConfig, "ffn", "share of FFN neurons to remove, in [0, 1)")
    _option(p, PruneConfig, "importance", "magnitude: weight L2 norms; taylor: |weight x gradient| of the task loss")
    _option(p, PruneConfig, "scope", "uniform: the same share in every layer; global: rank all layers together")
    _option(p, PruneConfig, "importance_batches", "training batches whose gradients feed --importance taylor")
    g = p.add_argument_group("recovery (distillation from the unpruned model)")
    _option(g, PruneConfig, "recover_epochs", "epochs of recovery distillation (0: none)")
    _option(g, PruneConfig, "teacher", "teacher for recovery (default: the unpruned --model)")
    _option(g, PruneConfig, "lr", "peak learning rate of recovery")
    _option(g, PruneConfig, "batch_size", "batch size for scoring and recovery")
    for key in ("grad_accum", "warmup_ratio", "max_length", "pooling", "seed"):
        _option(g, PruneConfig, key)
    _option(g, PruneConfig, "stride", aliases=STRIDE_ALIASES)
    _option(g, PruneConfig, "sampling", "batch order during recovery")
    _option(g, PruneConfig, "save_steps", "checkpoint recovery every N steps")
    _option(g, PruneConfig, "resume", "continue an interrupted recovery from its last checkpoint (made under the same "
            "settings)")
    for key in ("temperature", "alpha_kd", "alpha_hard"):
        _option(g, PruneConfig, key)
    _option(g, PruneConfig, "intermediate", "hidden-state and attention losses during recovery")
    _option(g, PruneConfig, "allow_pickle")
    _add_data_flags(p)
    _add_device_flag(p, "scoring, evaluation and recovery")
    _add_precision_flag(p, "recovery (distillation)", bf16_alias=True)
    p.set_defaults(func=cmd_stage)


def _add_summary(sub: "argparse._SubParsersAction") -> None:
    """``bert-compress summary``."""
    p = sub.add_parser("summary", help="print a side-by-side table of artifacts from their compress.json")
    p.add_argument("artifacts", nargs="+", help="artifact folders")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.set_defaults(func=cmd_summary)


#: The hand-written commands, in the order ``--help`` lists them.
_COMMANDS: tuple[Callable[["argparse._SubParsersAction"], None], ...] = (
    _add_teacher, _add_distill, _add_pretrain, _add_students, _add_export, _add_quantize, _add_optimize, _add_predict,
    _add_serve, _add_run, _add_bench, _add_gate, _add_prune, _add_summary,
)


def build_parser() -> argparse.ArgumentParser:
    """The whole ``bert-compress`` parser: the global flags, the hand-written commands, then one command per stage
    registered from outside the package (flags from its config)."""
    parser = argparse.ArgumentParser(
        prog="bert-compress",
        description="Distil, prune, quantize and export BERT-family models (sentence and sentence-pair "
                    "classifiers, taggers, extractive QA readers), and measure the result.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add in _COMMANDS:
        add(sub)

    for stage in all_stages():  # a stage registered from outside the package: flags from its config
        if stage.name not in sub.choices:
            add_stage_command(sub, stage)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # HF_HUB_OFFLINE is the user's: a hub id (--model org/name, --data hf:NAME) downloads when the hub
    # is reachable; nothing else contacts it. Tests and `make demo` set it to 1 (compress/core/hub.py says why).

    stage = find(args.command)
    if stage is not None and stage.timed:
        # Before torch loads OpenMP: idle threads sleep instead of spinning, so interleaved runtimes do
        # not steal each other's cores (measured: p90 latency several times p50 without it).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    configure_progress()
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except CompressError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted. Run the same command with --resume to continue from the last checkpoint.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
