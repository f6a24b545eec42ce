"""Content hashes of the code behind a result, so cached results go stale when it changes.

Output folders and Prefect cache keys include these digests: the same inputs through
changed code (ours, or a different llm-compressor) are computed anew, never reused.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path
from types import ModuleType


def source_digest(*modules: ModuleType, packages: tuple[str, ...] = (),
                  trees: tuple[Path, ...] = ()) -> str:
    """Digest of modules' source, installed package versions and every file under `trees`
    (data and config that shape the result, e.g. eval task definitions)."""
    h = hashlib.sha256()
    for module in modules:
        h.update(Path(module.__file__ or "").read_bytes())
    for tree in trees:
        for path in sorted(p for p in tree.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(str(path.relative_to(tree)).encode())
            h.update(path.read_bytes())
    for name in packages:
        h.update(f"{name}=={importlib.metadata.version(name)}".encode())
    return h.hexdigest()[:12]
