"""The stages (artifact + config -> artifact) and the machinery they share (training loop parts, losses,
long texts, quality checks, fingerprints); the registry that lists them is :mod:`compress.stages.registry`
(docs/development.md, "Stages")."""
