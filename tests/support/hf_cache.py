"""Real Hugging Face caches on disk, built in tests (the hub itself is out of reach).

Models: the layout ``huggingface_hub`` writes when it downloads ``org/name`` at commit ``C``:
``models--org--name/blobs/<hash>`` holding the bytes, ``snapshots/C/<file>`` symlinks to them, and
``refs/<branch or tag>`` holding ``C``. ``snapshot_download(..., local_files_only=True)`` and
``from_pretrained`` read exactly this.

Datasets: what ``datasets.load_dataset("org/name")`` prepares online and reads back offline
(datasets 5.2: offline it reads only this prepared cache, never the hub cache):
``org___name/CONFIG/0.0.0/C/`` with ``name-SPLIT.arrow`` files and ``dataset_info.json``. It is
written by the same packaged parquet builder, with the same config and dataset names, that a hub
load uses; only the parquet files come from a local folder instead of the hub.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def add_model_snapshot(cache: Path, repo_id: str, source: Path, commit: str, refs: tuple[str, ...] = ("main",)) -> Path:
    """Put the files of ``source`` into ``cache`` as snapshot ``commit`` of model ``repo_id``."""
    assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit)
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for file in sorted(source.iterdir()):
        if not file.is_file():
            continue
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            blob.write_bytes(data)
        link = snapshot / file.name
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def add_dataset(cache: Path, repo_id: str, splits: dict, config: str = "default",
                commit: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """Prepare ``splits`` (name -> ``datasets.Dataset``) in ``cache`` as config ``config`` of ``repo_id``."""
    from datasets import load_dataset_builder

    name = repo_id.split("/")[-1]
    namespace = repo_id.split("/")[0] if "/" in repo_id else None
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / name  # the builder names the arrow files after this folder, as after the hub repo
        (repo / config).mkdir(parents=True)
        lines = ["---", "configs:", f"- config_name: {config}", "  data_files:"]
        for split, ds in splits.items():
            ds.to_parquet(str(repo / config / f"{split}.parquet"))
            lines += [f"  - split: {split}", f"    path: {config}/{split}.parquet"]
        (repo / "README.md").write_text("\n".join(lines + ["---", ""]))
        builder = load_dataset_builder(str(repo), config, cache_dir=str(Path(tmp) / "scratch"))
        folder = cache / (f"{namespace}___{name}" if namespace else name) / config / "0.0.0" / commit
        builder.download_and_prepare(output_dir=str(folder))
    for lock in cache.rglob("*.lock"):
        lock.unlink(missing_ok=True)
    return folder

