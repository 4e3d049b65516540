"""Mutation testing of the modules where a silent bug costs users most, one module at a time (``make mutation``).

Why a driver around mutmut: mutmut reads one ``[tool.mutmut]`` table per project, but each module
here should be checked against only the tests that concern it (so a mutant costs seconds, not the
whole suite), and only in the functions that decide something (the gate's verdicts, not its table
formatting; the quantize fallback loop, not the argument checks before it). So for every module this
script copies the working tree into a scratch folder, writes that folder's ``[tool.mutmut]`` table
(the one file to mutate, the test files to run), generates the mutants, keeps those in the listed
functions (and line ranges), runs mutmut on exactly those, and prints a score.

Statements that only build text for people (``print``, warnings, and in the gate the "measured"
column, the interval as shown and the messages) get no mutants, and mutants that only change the wording of a message (a string literal with a space in it, such as an
error message, a log line or an interval's description, reworded or replaced by ``None``) are counted
apart and not run: they cannot make a verdict, a key, a
pruned unit or a chosen candidate wrong, and a test pinning every message's wording would test the
prose. String literals without spaces (``"pass"``, ``"fail"``, dictionary keys, key formats) are
mutated like any other code. mutmut leaves ``@property`` methods alone (its trampoline cannot wrap them),
so ``SoftLabelStore.complete`` and ``CandidateSpec.name`` are not in the lists.

Usage::

    python tools/mutation/mutate.py                 # every module, one after the other
    python tools/mutation/mutate.py stats gate      # some modules
    python tools/mutation/mutate.py --list          # the modules, their functions and tests

The score of a module is killed / (killed + survived): "killed" includes timeouts and crashes (the
mutant broke the run), "survived" includes mutants no selected test reaches. Surviving mutants are
printed as diffs; ``--json FILE`` also writes the numbers and survivors.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the scratch copy holds: the packages and what their tests read.
COPY = ("compress", "benchmarks", "students", "tests", "recipes", "docs", "pyproject.toml", "README.md", "Makefile",
        "requirements-serve.txt")
PACKAGES = ("compress", "benchmarks", "students")


@dataclass
class Target:
    """The functions of one source file to mutate, and the tests that concern them."""

    file: str
    #: ``name`` for a module-level function, ``Class.method`` for a method; a trailing ``?`` marks one that
    #: older trees lack (``--source`` of an earlier commit), skipped there instead of stopping the run.
    functions: list[str]
    tests: list[str]
    #: ``{function: (first line, last line)}``: substrings of the first and last source line of the
    #: part of that function to mutate (for a long function of which only a loop decides).
    ranges: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: ``{function: (first line, last line)}``: a part of that function left out, marked the same way (a
    #: branch that only a slow multi-process test reaches; the table in docs/development.md names it).
    skip: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: A file that older trees lack: skipped there.
    optional: bool = False
    #: Regular expressions of source lines whose statements only build text for people (a message, the
    #: "measured" column): mutmut generates no mutant there (its ``do_not_mutate_patterns``).
    display: list[str] = field(default_factory=list)
    #: Seconds added to each mutant's time limit (mutmut's ``timeout_constant``). mutmut estimates a
    #: mutant's time from its tests' call phases only, not their fixtures' setup: where a fixture trains
    #: or exports a model, the default 1 s would stop an unchanged run and count a timeout as a kill.
    timeout_constant: float = 1.0
    #: Modules mutmut's fork server imports once before it forks a test run per mutant (its
    #: ``forkserver_warmup = "import"``), instead of collecting the tests: what the tests import lazily and
    #: slowly (torch, transformers' BERT: about 10 s of each quantize mutant's run on these cores). Only
    #: installed packages: the project's own modules must be imported by each run, from the mutated copy.
    preload: list[str] = field(default_factory=list)

    @property
    def module(self) -> str:
        return self.file[:-3].replace("/", ".")

    def pattern(self, function: str) -> str:
        cls, _, name = function.rpartition(".")
        mangled = f"x\u01c1{cls}\u01c1{name}" if cls else f"x_{name}"
        return f"{self.module}.{mangled}__mutmut_"


#: Statements that only talk to people, in every module: printing and warnings.
DISPLAY = [r"^\s*print\(", r"^\s*warnings\.warn\("]
#: The gate's text: the measured value as shown, the interval as shown, the messages.
GATE_DISPLAY = [r"^\s*(message|measured|shown|shown_ci|where|what|bound|other|unit|fmt|size|of|how)\s*(\+?=|,)",
                r"^\s*(fell|shown), ", r"^\s*message \+= "]

#: The pruning tests that decide on planted units and exact removals, on untrained tiny BERTs (seconds
#: per mutant): not test_prune.py's stage tests, which train a teacher and run the stage (with recovery,
#: export, a CLI run) for every mutant, nor test_prune_recipe.py (a whole recipe run).
PRUNE_TESTS = ["tests/unit/compress/stages/prune/test_prune_importance.py", "tests/unit/compress/stages/prune/test_prune.py::test_select_units_uniform_global_and_floors",
               "tests/unit/compress/stages/prune/test_prune.py::test_ratio_zero_changes_nothing",
               "tests/unit/compress/stages/prune/test_prune.py::test_removal_is_physical_and_equals_masking_the_original"]

#: The tests of a candidate's record against the fp32 model and its budget verdict (compress.stages.quality's Scorer and a
#: tagger's per-type rules).
QUALITY_TESTS = [f"tests/integration/test_ner_chain.py::{t}" for t in (
    "test_a_collapsed_type_fails_the_check_even_when_overall_f1_holds",
    "test_collapse_is_judged_against_the_reference_f1_of_the_type",
    "test_a_classifier_split_is_scored_on_accuracy_and_agreement",
    "test_a_type_only_the_reference_predicts_gets_its_drop_and_is_not_judged")] + [
    "tests/unit/compress/test_type_budget.py"]

#: Each module's tests are the unit tests written for it, not the end-to-end tests that also pass through
#: it (a pipeline or distillation run per mutant would make a module take hours on two cores).
MODULES: dict[str, list[Target]] = {
    # The gate's interval arithmetic and every verdict it takes.
    "stats": [Target("compress/core/stats.py", [
        "Interval.verdict", "_check_confidence", "percentile_interval", "block_length", "block_bootstrap_indices",
        "_paired_ratios", "speedup_replicates", "speedup_interval", "ratio_of_independent", "series_median_interval",
        "throughput_interval", "paired_table", "relative_to?", "accuracy_drop_interval", "unpaired_accuracy_drop_interval",
        "detectable_drop", "proportion_interval", "mean_over_seeds_interval", "history_score", "history_flagged",
        "_micro_f1?", "_sentence_totals?", "f1_interval?", "f1_drop_interval?", "unpaired_f1_drop_interval?",
        "ratio_interval?"],
        ["tests/unit/benchmarks/test_stats.py"])],
    # The gate's verdicts: which rules apply, each rule's decision, how decisions combine into the exit
    # code (not the loading and validation of its files, the plumbing between them, or the output formats).
    "gate": [Target("benchmarks/gate.py", [
        "combine", "_evaluate_rule", "_latency_rule", "_accuracy_drop",
        "_agreement", "_traffic_agreement?", "_regression", "_accuracy_regression_check", "_accuracy_regression",
        "_same_predictions", "_welch_drop"],
        ["tests/unit/benchmarks/test_gate.py"], display=GATE_DISPLAY),
             Target("benchmarks/gate_rules.py", ["GateRules.for_artifact"], ["tests/unit/benchmarks/test_gate.py"], display=GATE_DISPLAY),
             Target("benchmarks/gate_output.py", ["outcome"], ["tests/unit/benchmarks/test_gate.py"], display=GATE_DISPLAY)],
    # What makes a finished stage current or a checkpoint resumable.
    "fingerprint": [Target("compress/stages/fingerprint.py", [
        "data_fingerprint", "corpus_fingerprint", "model_fingerprint", "_path_fingerprint", "stage_inputs",
        "stage_identity", "identity_sha256"],
        ["tests/unit/compress/test_fingerprint_keys.py"])],
    # The soft-label cache: its key, and the store that fills and writes it. ``SoftLabelStore.get`` is one
    # subscript (``return self.logits[rows]``), in which mutmut finds nothing to change: listing it stops the run.
    "soft_labels": [
        # teacher_logits' torchrun branch (each rank labels every size-th row, then gathers) runs only with
        # WORLD_SIZE > 1: tests/integration/test_distributed.py (slow: two processes, over a minute a run here) checks its
        # cache against one process's, too slow to run per mutant.
        Target("compress/stages/teacher.py", ["_ids_digest", "soft_label_cache_path", "teacher_logits"],
               ["tests/unit/compress/test_fingerprint_keys.py"],
               skip={"teacher_logits": ("mine = np.arange(rank, len(tokenized), size)",
                                        "logits = gather_rows(local, mine, len(tokenized))")}),
        Target("compress/stages/distill/soft_labels.py", [
            "SoftLabelStore.__init__", "SoftLabelStore.missing", "SoftLabelStore.put", "SoftLabelStore.save"],
            ["tests/unit/compress/test_fingerprint_keys.py"])],
    # Predictor's batching: sorting by length, padding, and putting outputs back in the caller's order.
    "runtime": [
        Target("compress/runtime/predictor.py", [
            "normalize_texts", "encode_batches", "softmax", "Predictor.logits", "Predictor.predict",
            "Predictor.windows?", "Predictor.run_windows?", "Predictor.window_batches?", "ChoicePredictor.for_batch_size",
            "ChoicePredictor._run"],
            ["tests/unit/compress/test_batching_order.py"]),
        # Where the batching moved with long-text windows: sorting by length and padding.
        Target("compress/core/windows.py", ["Windows.batches", "length_sorted_batches", "pad_rows"],
               ["tests/unit/compress/test_batching_order.py"], optional=True)],
    # Which heads and neurons pruning removes, and the removal itself.
    "prune": [
        Target("compress/stages/prune/importance.py", [
            "importance_criterion", "score_units", "_finite", "select_units", "_nearest", "accumulate_task_gradients"],
            PRUNE_TESTS, timeout_constant=30.0),
        Target("compress/stages/prune/removal.py", ["remove_units", "prune_model", "_synthetic_inputs"], PRUNE_TESTS,
               timeout_constant=30.0)],
    # The INT8 fallback plan, the loop that tries it, and the choice of the kept candidate.
    "quantize": [Target("compress/stages/quantize.py", ["candidate_plan", "quantize", "_choose"],
                        # The fallback tests on one planted model (trained once per run: FIXTURE_CACHE) that
                        # need no ORT run of every candidate: the PyTorch INT8 loop, the plans, the choice, ORT's
                        # failure on every candidate, the requested setting and the fp32 model's reading passed
                        # to the candidates, and one ORT candidate with --reduce-range. The ORT budget tests of
                        # the same file cost a minute per mutant; every other quantize test trains and exports a
                        # model of its own, and reaches the loop only through its first candidate.
                        [f"tests/unit/compress/test_quantize_fallback.py::{t}" for t in (
                            "test_candidate_plans_are_pinned",
                            "test_choose_keeps_the_first_within_budget_else_the_most_accurate_and_earliest",
                            "test_when_every_candidate_fails_to_build_nothing_is_written_and_each_error_is_named",
                            "test_torch_loop_measures_every_candidate_and_keeps_the_best",
                            "test_torch_loop_stops_at_the_first_candidate_within_budget",
                            "test_without_data_one_candidate_is_built_and_nothing_is_judged",
                            "test_the_requested_setting_and_the_fp32_reading_go_to_the_candidates",
                            "test_reduce_range_is_passed_to_the_plan_and_to_the_quantizer")],
                        ranges={"quantize": ("candidates: list[dict[str, Any]] = []",
                                             "print(f\"warning: {notes[-1]}\", file=sys.stderr)")},
                        timeout_constant=60.0,
                        preload=["torch", "transformers", "transformers.models.bert.modeling_bert", "onnx",
                                 "onnxruntime.quantization", "pandas", "datasets"]),
                 # A candidate's record against the fp32 model and its budget verdict, for every task (entity F1, and
                 # a tagger's per-type rules: collapse and the per-type budget).
                 Target("compress/stages/quality.py", ["Scorer.compare", "Scorer.failures"], QUALITY_TESTS, optional=True),
                 Target("compress/tasks/token_classification/scoring.py",
                        ["TaggerScorer.compare_more", "TaggerScorer.type_failures", "collapsed_types",
                         "TaggerScorer.type_drop_intervals", "types_over_budget"], QUALITY_TESTS, optional=True),
                 # How a candidate's failure is quoted in the report (also optimize's, export's and OpenVINO's).
                 Target("compress/core/errors.py", ["first_line", "describe"], ["tests/unit/compress/test_errors.py"])],
}

KILLED = {"killed", "timeout", "segfault", "caught by type check"}
#: mutmut runs each mutant in a process forked from one that has already run the tests. A forked child
#: of a process whose torch (OpenMP) thread pool has started hangs on its first parallel operation, so
#: every mutant of a module whose tests run torch would end as a "timeout", which counts as killed. One
#: intra-op thread per process (mutmut runs ``--max-children`` of them side by side) keeps the children working.
MUTMUT_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: A folder of the module's scratch copy where tests build once per run what does not depend on the mutated
#: file, such as a trained model (tests/unit/compress/test_quantize_fallback.py's ``built_once``): each mutant's test run
#: is a fresh pytest session, which would train it again (half of a quantize mutant's time).
FIXTURE_CACHE = "MUTATION_FIXTURE_CACHE"


def _mutmut() -> str:
    exe = Path(sys.executable).with_name("mutmut")
    if not exe.exists():
        sys.exit("mutmut is not installed in this environment: pip install -e '.[mutation]'")
    return str(exe)


def _matching(work: Path, pattern: str) -> list[str]:
    """Test files matching a glob, or a ``file::test`` node id when its file exists."""
    if "::" in pattern:
        return [pattern] if (work / pattern.split("::")[0]).exists() else []
    return [str(p.relative_to(work)) for p in work.glob(pattern)]


def prepare(work: Path, targets: list[Target], source: Path = ROOT) -> None:
    """A fresh scratch copy of the tree at ``source`` with this module's ``[tool.mutmut]`` table."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPY:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, work / name)
    tests = sorted({test for t in targets for pattern in t.tests for test in _matching(work, pattern)})
    if not tests:
        raise SystemExit(f"no test file matches {[t.tests for t in targets]}")

    def toml_list(items) -> str:
        return "[" + ", ".join(json.dumps(str(i)) for i in items) + "]"

    with open(work / "pyproject.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[tool.mutmut]\n"
                     f"source_paths = {toml_list(PACKAGES)}\n"
                     f"only_mutate = {toml_list(sorted({t.file for t in targets}))}\n"
                     f"also_copy = {toml_list(n for n in COPY if n not in PACKAGES + ('tests', 'pyproject.toml'))}\n"
                     "do_not_mutate_patterns = ["
                     + ", ".join("'" + p + "'" for p in DISPLAY + [p for t in targets for p in t.display]) + "]\n"
                     f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
                     'pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider", "-m", "not slow"]\n'
                     "use_git_change_detection = false\n"
                     # A mutant that makes a loop endless is killed after 3x its tests' normal time, not 15x.
                     "timeout_multiplier = 3.0\n"
                     f"timeout_constant = {max(t.timeout_constant for t in targets)}\n")
        preload = sorted({m for t in targets for m in t.preload})
        if preload:
            (work / "mutmut-preload.txt").write_text("\n".join(preload) + "\n", encoding="utf-8")
            handle.write('forkserver_warmup = "import"\n'
                         f"preload_modules_file = {json.dumps(str(work / 'mutmut-preload.txt'))}\n")


GENERATE = """
import difflib, json, sys
from pathlib import Path
from mutmut.__main__ import create_mutants
from mutmut.utils.file_utils import copy_src_dir, copy_also_copy_files
from mutmut.mutation.data import MutantLineSpans
from mutmut.mutation.diff_apply import generated_function_names
copy_src_dir(); copy_also_copy_files(); create_mutants(1)
out = {}
for path in json.loads(sys.argv[1]):
    names = list(json.loads(Path("mutants", path + ".meta").read_text())["exit_code_by_key"])
    pairs = {n: generated_function_names(n) for n in names}
    wanted = sorted({f for pair in pairs.values() for f in pair})
    spans = MutantLineSpans.load(path)  # one read of the mutated file, no parsing
    source = dict(zip(wanted, spans.read_function_sources(wanted)))
    for name, (orig, mutant) in pairs.items():
        a = source[orig].splitlines()
        b = source[mutant].replace(mutant, orig, 1).splitlines()
        out[name] = "\\n".join(difflib.unified_diff(a, b, path, path, lineterm="", n=1))
print(json.dumps(out))
"""


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """The removed and added lines of a unified diff."""
    body = [line for line in diff.splitlines() if not line.startswith(("---", "+++", "@@"))]
    return [line[1:] for line in body if line.startswith("-")], [line[1:] for line in body if line.startswith("+")]


def is_message_mutant(diff: str) -> bool:
    """Whether the mutant only rewords a string literal that holds a space (a message, not a key or a verdict)."""
    old, new = changed_lines(diff)
    if len(old) != 1 or len(new) != 1:
        return False
    a, b = old[0], new[0]
    start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a, end_b = end_a - 1, end_b - 1
    changed = a[start:end_a]
    if b[start:end_b].strip() in ("None", "") and _is_text_literal(changed):  # the message replaced by None
        return True
    if b.replace("XX", "") == a:  # "text" -> "XXtextXX": the literal is what lies between the insertions
        first = b.find("XX")
        literal = b[first + 2:b.find("XX", first + 2)]
        return " " in literal
    if a.lower() == b.lower() or a.upper() == b.upper():  # a literal's case changed
        quote_before = max(a.rfind('"', 0, start + 1), a.rfind("'", 0, start + 1))
        return " " in changed or (quote_before >= 0 and " " in a[quote_before:end_a])
    return False


def _is_text_literal(code: str) -> bool:
    """Whether ``code`` is one string literal (an f-string too) holding a space: a message or a description."""
    import ast

    try:
        node = ast.parse(code.strip().rstrip(","), mode="eval").body
    except SyntaxError:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return " " in node.value
    return isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and " " in str(v.value)
                                                     for v in node.values)


def in_range(diff: str, source_lines: list[str], bounds: tuple[str, str]) -> bool:
    """Whether the lines a mutant changes lie in the part of the function between the two marker lines."""
    first = next(i for i, line in enumerate(source_lines) if bounds[0] in line)
    last = next(i for i, line in enumerate(source_lines) if i >= first and bounds[1] in line)
    allowed = {line.strip() for line in source_lines[first:last + 1]}
    old, _ = changed_lines(diff)
    return bool(old) and all(line.strip() in allowed for line in old)


def select(work: Path, targets: list[Target]) -> tuple[dict[str, str], dict[str, str]]:
    """``(to_run, messages)``: mutants of the listed functions, each with its diff."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    files = [t.file for t in targets]
    proc = subprocess.run([sys.executable, "-c", GENERATE, json.dumps(files)], cwd=work, env=env, text=True,
                          capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"mutant generation failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    diffs: dict[str, str] = json.loads(proc.stdout.strip().splitlines()[-1])
    run, messages = {}, {}
    for target in targets:
        source = (work / target.file).read_text(encoding="utf-8").splitlines()
        for function in target.functions:
            optional = function.endswith("?")
            function = function.rstrip("?")
            prefix = target.pattern(function)
            names = [n for n in diffs if n.startswith(prefix) and n[len(prefix):].isdigit()]
            if not names and optional:
                print(f"   ({target.file}: no {function} in this tree; skipped)")
                continue
            if not names:
                raise SystemExit(f"{target.file}: no mutant of {function} (renamed? update tools/mutation/mutate.py)")
            for name in names:
                diff = diffs[name]
                if function in target.ranges and not in_range(diff, source, target.ranges[function]):
                    continue
                if function in target.skip and in_range(diff, source, target.skip[function]):
                    continue
                (messages if is_message_mutant(diff) else run)[name] = diff
    return run, messages


def results(work: Path, targets: list[Target]) -> dict[str, str]:
    from mutmut.stats import status_by_exit_code

    status = {}
    for target in targets:
        meta = json.loads((work / "mutants" / (target.file + ".meta")).read_text(encoding="utf-8"))
        for name, code in meta["exit_code_by_key"].items():
            status[name] = status_by_exit_code[code]
    return status


def run_module(name: str, work_root: Path, max_children: int, source: Path = ROOT, report_only: bool = False,
               sample: int | None = None) -> dict:
    targets = [t for t in MODULES[name] if not t.optional or (source / t.file).exists()]
    work = work_root / name
    t0 = time.monotonic()
    if not report_only:
        prepare(work, targets, source)
    to_run, messages = select(work, targets)
    population = len(to_run)
    if sample and sample < population:  # a fixed random subset: the same mutants on every run of this tree
        import random

        keep = set(random.Random(0).sample(sorted(to_run), sample))
        to_run = {n: d for n, d in to_run.items() if n in keep}
    print(f"== {name}: {len(to_run)} mutants{f' (a random {sample} of {population})' if len(to_run) < population else ''} in {sum(len(t.functions) for t in targets)} functions "
          f"({len(messages)} message-only mutants not run); tests: {', '.join(t for x in targets for t in x.tests)}",
          flush=True)
    log = work_root / f"{name}.mutmut.log"
    if not report_only:
        with open(log, "w", encoding="utf-8") as handle:
            proc = subprocess.run([_mutmut(), "run", "--max-children", str(max_children), *sorted(to_run)], cwd=work,
                                  env=dict(os.environ, **MUTMUT_ENV, **{FIXTURE_CACHE: str(work / "fixture-cache")}),
                                  stdout=handle, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            print(log.read_text(encoding="utf-8")[-4000:])
            raise SystemExit(f"mutmut failed on {name} (exit {proc.returncode}); its log: {log}")
    status = results(work, targets)
    counted = {n: status.get(n, "not checked") for n in to_run}
    killed = sorted(n for n, s in counted.items() if s in KILLED)
    survived = sorted(n for n, s in counted.items() if s not in KILLED)
    score = len(killed) / len(counted) if counted else 1.0
    timeouts = sum(1 for s in counted.values() if s == "timeout")
    minutes = (time.monotonic() - t0) / 60
    print(f"== {name}: {len(killed)} of {len(counted)} killed ({100 * score:.1f}%; {timeouts} of them by timeout), "
          f"{minutes:.1f} min", flush=True)
    for n in survived:
        print(f"-- {n} ({counted[n]})\n{to_run[n]}")
    return {"module": name, "killed": len(killed), "mutants": len(counted), "population": population,
            "score": round(score, 4), "timeouts": timeouts,
            "messages_not_run": len(messages), "minutes": round(minutes, 1),
            "survivors": {n: {"status": counted[n], "diff": to_run[n]} for n in survived}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"some of {', '.join(MODULES)} (default: all)")
    parser.add_argument("--work", default=os.environ.get("MUTATION_WORK", "/tmp/bert-compress-mutation"),
                        help="scratch folder (a copy of the tree per module)")
    parser.add_argument("--max-children", type=int, default=int(os.environ.get("MUTATION_CHILDREN", "2")))
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="the tree whose code and tests are copied (default: this checkout; another checkout, "
                             "such as `git archive` of an older commit, measures that commit)")
    parser.add_argument("--json", help="also write the scores and survivors to this file")
    parser.add_argument("--sample", type=int, default=None,
                        help="run a fixed random N of each module's mutants (an estimate of the score, for a slow "
                             "machine; default: all)")
    parser.add_argument("--report-only", action="store_true",
                        help="score the last run's mutants in --work again (after a change to this script), run nothing")
    parser.add_argument("--list", action="store_true", help="print the modules, functions and tests, run nothing")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose among {', '.join(MODULES)}")
    chosen = args.modules or list(MODULES)
    if args.list:
        for m in chosen:
            for t in MODULES[m]:
                print(f"{m}: {t.file}: {', '.join(t.functions)}\n    tests: {', '.join(t.tests)}")
        return 0
    reports = [run_module(m, Path(args.work), args.max_children, args.source.resolve(), args.report_only,
                          args.sample) for m in chosen]
    print("\nmodule        killed / mutants   score")
    for r in reports:
        print(f"{r['module']:<13} {r['killed']:>6} / {r['mutants']:<7}  {100 * r['score']:5.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
