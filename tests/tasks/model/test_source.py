import pytest

from quantgate.tasks.model.source import ModelSourceError, resolve_model


def test_hf_dir_is_used_in_place_with_a_content_digest(tiny_model, tmp_path):
    a = resolve_model(tiny_model, tmp_path)
    assert a.path == tiny_model and len(a.digest) == 64
    assert resolve_model(tiny_model, tmp_path).digest == a.digest


def test_missing_and_corrupt_files_say_what_to_fix(tmp_path):
    with pytest.raises(ModelSourceError, match="missing"):
        resolve_model(str(tmp_path / "absent.gguf"), tmp_path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOTAGGUF" * 10)
    with pytest.raises(ModelSourceError, match="bad magic"):
        resolve_model(str(bad), tmp_path)
    truncated = tmp_path / "trunc.gguf"
    truncated.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 7)
    with pytest.raises(ModelSourceError, match="corrupt"):
        resolve_model(str(truncated), tmp_path)
    (tmp_path / "notmodel").mkdir()
    with pytest.raises(ModelSourceError, match="no config.json"):
        resolve_model(str(tmp_path / "notmodel"), tmp_path)
    with pytest.raises(ModelSourceError, match="not a known model"):
        resolve_model("no-such-model", tmp_path)
    with pytest.raises(ModelSourceError, match="does not exist"):
        resolve_model(str(tmp_path / "gone" / "model"), tmp_path)
