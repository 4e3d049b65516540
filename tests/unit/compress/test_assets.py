"""Fetching safety: sha256 verification and archive extraction that refuses escapes and links."""

import io
import tarfile
import zipfile

import pytest

from compress.core import assets
from compress.core.errors import CompressError


def test_sha_mismatch_deletes_the_file(tmp_path, monkeypatch):
    f = tmp_path / "thing.whl"
    f.write_bytes(b"not the real thing")
    monkeypatch.setitem(assets.SHA256, "thing.whl", "0" * 64)
    with pytest.raises(CompressError, match="does not match"):
        assets.verify_sha256(f, "thing.whl")
    assert not f.exists()


def _tar(path, name, data=b"x", link=None):
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        if link:
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
        else:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_tar_escape_and_links_are_refused(tmp_path):
    with pytest.raises(CompressError, match="outside"):
        assets.safe_extract_tar(_tar(tmp_path / "a.tgz", "../evil.txt"), tmp_path / "out")
    with pytest.raises(CompressError, match="link"):
        assets.safe_extract_tar(_tar(tmp_path / "b.tgz", "ok/link", link="/etc/passwd"), tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()
    assets.safe_extract_tar(_tar(tmp_path / "c.tgz", "ok/file.txt", b"hello"), tmp_path / "out")
    assert (tmp_path / "out" / "ok" / "file.txt").read_bytes() == b"hello"


def test_zip_escape_and_symlinks_are_refused(tmp_path):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../../evil.txt", "x")
    with pytest.raises(CompressError, match="outside"):
        assets.safe_extract_zip(bad, tmp_path / "out")
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("model/link")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(CompressError, match="symlink"):
        assets.safe_extract_zip(link, tmp_path / "out")


def test_unknown_model_folder_message(tmp_path):
    with pytest.raises(CompressError, match="minilm, mpnet-base"):
        assets.resolve_model(str(tmp_path / "nope"))


def test_the_sentence_pipeline_files_of_a_published_model_folder_are_kept(tmp_path):
    """The built-in sentence models' cache folders keep modules.json, 1_Pooling/ and sentence_bert_config.json, which
    the two-tower task reads their pooling and normalisation from (the same as folder.BUILTIN states)."""
    from compress.core.assets import _keep_sentence_pipeline
    from compress.tasks.sentence_embedding.folder import SentenceConfig, sentence_config, write_sentence_config

    src, dst = tmp_path / "published", tmp_path / "cache"
    src.mkdir()
    dst.mkdir()
    write_sentence_config(src, SentenceConfig(pooling="mean", normalize=True, max_seq_length=256), dimension=384)
    _keep_sentence_pipeline(src, dst)
    assert sorted(p.name for p in dst.iterdir()) == ["1_Pooling", "modules.json", "sentence_bert_config.json"]
    got = sentence_config(dst)
    assert (got.pooling, got.normalize, got.dimension, got.max_seq_length) == ("mean", True, 384, 256)
    _keep_sentence_pipeline(tmp_path / "nothing-there", dst)  # a package without them: nothing to keep
