"""Where task data comes from, shared by the tagging and QA readers: hub split picking, built-in files.

Both readers take a ``datasets.DatasetDict`` by the same split names and check the files they ship
the same way, so those two rules live here once (their messages name the data set they serve).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from compress.core.errors import CompressError
from compress.core.assets import SHA256, sha256_file
from compress.tasks.tables import SPLIT_ALIASES


def hub_splits(loaded: Any, origin: str,
               aliases: Mapping[str, tuple[str, ...]] | None = None) -> tuple[dict[str, tuple[str, Any]], list[str]]:
    """``{split: (label, dataset)}`` for each of train/validation/test found in ``loaded``, and the notes.

    ``loaded`` is a ``DatasetDict`` (or one Dataset, taken as train); split names are matched case-blind
    against ``aliases`` (``compress.tasks.tables.SPLIT_ALIASES`` by default); the label, ``origin[name]``, is what
    messages and ``compress.json`` call that split. No train split is an error; splits not taken are a note.
    """
    if aliases is None:
        from compress.tasks.tables import SPLIT_ALIASES as aliases
    if not hasattr(loaded, "keys"):
        loaded = {"train": loaded}
    available = {s.lower(): s for s in loaded.keys()}
    found: dict[str, tuple[str, Any]] = {}
    used: set[str] = set()
    for split, names in aliases.items():
        name = next((available[a] for a in names if a in available), None)
        if name is not None:
            used.add(name)
            found[split] = (f"{origin}[{name}]", loaded[name])
    if "train" not in found:
        raise CompressError(f"{origin}: no train split (splits: {', '.join(loaded.keys())}). A task needs a split "
                            "named train.")
    unused = sorted(set(loaded.keys()) - used)
    return found, [f"splits not used: {', '.join(unused)}"] if unused else []


def check_builtin_file(path: Path, key: str, what: str) -> None:
    """Refuse a built-in data file that is missing or whose sha256 is not the one recorded under ``key``."""

    if not path.is_file():
        raise CompressError(f"{path}: the built-in {what} file is missing from the installed package. Reinstall "
                            "bert-compress (pip install --force-reinstall .).")
    actual, expected = sha256_file(path), SHA256[key]
    if actual != expected:
        raise CompressError(f"{path}: sha256 {actual} does not match the recorded {expected}: the package's copy of "
                            f"{what} was changed. Reinstall bert-compress (pip install --force-reinstall .).")


def folder_splits(path: Path, suffixes: tuple[str, ...], no_train: str,
                  stem_prefix: bool = False) -> dict[str, Path]:
    """``{split: file}`` for a data folder: one file per split, named by ``compress.tasks.tables.SPLIT_ALIASES``.

    Only files ending in one of ``suffixes`` count; with ``stem_prefix`` a name's part before its first
    ``-`` also matches (``dev-v1.1.json`` is the dev split). Two files for one split are an error, and
    so is no train file (``no_train`` says what the folder should hold).
    """

    files = [p for p in sorted(path.iterdir()) if p.is_file() and p.suffix.lower() in suffixes]
    found: dict[str, Path] = {}
    for split, aliases in SPLIT_ALIASES.items():
        matches = [p for p in files
                   if p.stem.lower() in aliases or (stem_prefix and p.stem.lower().split("-")[0] in aliases)]
        if len(matches) > 1:
            raise CompressError(f"{path}: several files for the {split} split ({', '.join(m.name for m in matches)}); "
                                "keep one.")
        if matches:
            found[split] = matches[0]
    if "train" not in found:
        raise CompressError(f"{path}: no train file. {no_train}")
    return found
