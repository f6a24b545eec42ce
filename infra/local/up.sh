#!/usr/bin/env bash
# Long-lived local servers on loopback, state under .quantgate/ (same as `quantgate run`).
set -euo pipefail
cd "$(dirname "$0")/../.."
state="${QUANTGATE_STATE:-.quantgate}"
mkdir -p "$state"
export PREFECT_HOME="$PWD/$state/prefect" PREFECT_SERVER_ANALYTICS_ENABLED=false \
       MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
nohup .venv/bin/prefect server start --host 127.0.0.1 --port 4200 --analytics-off \
    >"$state/prefect-server.log" 2>&1 & echo $! >"$state/prefect.pid"
nohup .venv/bin/mlflow server --host 127.0.0.1 --port 5000 \
    --backend-store-uri "sqlite:///$PWD/$state/mlflow.db" \
    --default-artifact-root "$PWD/$state/mlartifacts" \
    >"$state/mlflow-server.log" 2>&1 & echo $! >"$state/mlflow.pid"
echo "Prefect http://127.0.0.1:4200  MLflow http://127.0.0.1:5000"
echo "export PREFECT_API_URL=http://127.0.0.1:4200/api MLFLOW_TRACKING_URI=http://127.0.0.1:5000"
