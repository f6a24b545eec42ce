#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/../.."
state="${QUANTGATE_STATE:-.quantgate}"
for name in prefect mlflow; do
  if [ -f "$state/$name.pid" ]; then kill "$(cat "$state/$name.pid")" 2>/dev/null || true; rm -f "$state/$name.pid"; fi
done
