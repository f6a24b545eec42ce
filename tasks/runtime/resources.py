"""What the Ray cluster this process is connected to can run."""

from __future__ import annotations


def cluster_gpus() -> float:
    """GPUs in the connected Ray cluster (0 when Ray is not initialized)."""
    import ray

    return float(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0.0
