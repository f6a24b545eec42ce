from types import ModuleType

from quantgate.tasks.runtime.digest import source_digest


def _module(path, text):
    path.write_text(text)
    m = ModuleType(path.stem)
    m.__file__ = str(path)
    return m


def test_digest_follows_source_and_package_versions(tmp_path):
    m = _module(tmp_path / "m.py", "x = 1\n")
    first = source_digest(m)
    assert source_digest(m) == first
    assert source_digest(m, packages=("torch",)) != first
    _module(tmp_path / "m.py", "x = 2\n")
    assert source_digest(m) != first
