"""Distillation: losses by name, teacher-to-student layer maps, and the Trainer-based loop."""
