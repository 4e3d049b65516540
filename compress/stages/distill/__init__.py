"""Distillation: the Trainer-based loop (`trainer`), its soft-label store and INT8 soft labels (losses live in
:mod:`compress.stages.losses`, layer maps in :mod:`students.layer_map`)."""
