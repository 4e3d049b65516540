"""Budgets: a recipe that fits its time (``budget: 30m``), planned from this machine's measured speed.

- :mod:`compress.budget.duration`: ``30m``, ``1h``, ``90s`` as seconds;
- :mod:`compress.budget.knobs`: the knobs a recipe may mark elastic (which stage setting, which way saves
  time, what its ``cost`` is per), and the recipe's ``elastic:`` section parsed against them;
- :mod:`compress.budget.measure`: :class:`~compress.budget.measure.SpeedMeasurement`, a few timed steps of the
  recipe's models at its shapes and precision;
- :mod:`compress.budget.plan`: each stage's time from a measurement, and the knobs scaled to fit;
- :mod:`compress.budget.decide`: a recipe's plan decided once (measured, or read back from the run folder).

This package's ``__init__`` imports nothing, so the pipeline can read the light modules without torch.
"""
