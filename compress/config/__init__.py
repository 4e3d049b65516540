"""One dataclass config per stage, built the same way from command-line flags, a recipe or ``compress.json``.

Each config is a plain dataclass (this module imports nothing heavy) with

- ``from_dict(d, where=...)``: keys checked against the fields (unknown ones rejected, the known
  ones listed), values type-checked (``limit: ten`` -> ``data.limit must be an integer, got
  'ten'``), then the values validated; every problem is reported at once in one
  :class:`ConfigError`, each with the key it is about, so a recipe can point at its line;
- ``to_dict()``: JSON-ready, what ``compress.json`` records under ``"config"``;
  ``from_dict(to_dict())`` gives back an equal config, so any artifact's stage can be rerun from it;
- ``problems()`` / ``validate()``: the impossible values (``--temperature must be > 0, got 0.0``).

``from_dict`` takes the nested form ``to_dict`` writes (``{"train": {"epochs": 3}}``) and the flat
form of the command line and recipes (``{"epochs": 3}``): the keys a stage's command has as flags
(``batch_size`` for ``--batch-size``) are the keys its recipe section takes.
"""

from compress.config.choices import *  # noqa: F401,F403
from compress.config.engine import *  # noqa: F401,F403
from compress.config.shared import *  # noqa: F401,F403
from compress.config.stage_configs import *  # noqa: F401,F403
