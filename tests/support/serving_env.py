"""A Python process in which the training stack cannot be imported: what a serving environment
without torch looks like, for the tests that serve ONNX artifacts there."""

from __future__ import annotations

import os

from tests.support.paths import ROOT

TRAINING_STACK = ("torch", "transformers", "datasets", "accelerate", "torch_pruning", "matplotlib", "onnx",
                  "onnxscript", "pandas", "pyarrow", "safetensors", "scipy", "sklearn")

BLOCKER = """
import importlib.abc, sys
BLOCKED = set(sys.argv.pop(1).split(","))
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed in a serving environment")
        return None
sys.meta_path.insert(0, Blocker())
"""


def blocked_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
