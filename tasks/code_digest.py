"""Content hashes of the code behind a result, so cached results go stale when it changes.

Output folders and Prefect cache keys include these digests: the same inputs through
changed code (ours, or a different llm-compressor) are computed anew, never reused.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path
from types import ModuleType


def source_digest(*modules: ModuleType, packages: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256()
    for module in modules:
        h.update(Path(module.__file__ or "").read_bytes())
    for name in packages:
        h.update(f"{name}=={importlib.metadata.version(name)}".encode())
    return h.hexdigest()[:12]
