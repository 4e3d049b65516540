"""Where the repository is, for tests that run its commands or read its files."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
