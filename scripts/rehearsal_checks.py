"""What the cluster rehearsal (scripts/rehearse_cluster.py) checks, each through the service that holds
it: Prefect's API for runs, schedules and cached task results, MLflow's server for runs and artifacts,
the judge endpoint's own log for the calls it answered. Each check prints one line and is kept for
the verdict."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any


class Checks:
    def __init__(self, ui: str, tracking: str, name: str) -> None:
        self.ui, self.tracking, self.name = ui, tracking, name
        self.failed: list[str] = []

    def _check(self, what: str, ok: bool, line: str) -> bool:
        print(f"  [{'ok' if ok else 'FAILED'}] {what}: {line}", flush=True)
        if not ok:
            self.failed.append(what)
        return ok

    def run_deployment(self, deployment: str) -> Any:
        from prefect.deployments import run_deployment

        t0 = time.monotonic()
        run = run_deployment(deployment, timeout=1800)
        self._check(f"run of {deployment}", run.state.is_completed(),
                    f"{run.name} {run.state.name} in {time.monotonic() - t0:.0f} s "
                    f"({self.ui}/runs/flow-run/{run.id})")
        return run

    def mlflow(self, experiment: str, store: Path) -> None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.tracking)
        exp = client.get_experiment_by_name(experiment)
        runs = client.search_runs([exp.experiment_id]) if exp else []
        stored = sorted(p.name for p in store.rglob("*") if p.is_file())
        self._check("MLflow on PostgreSQL", len(runs) >= 3 and "pipeline_config.json" in stored,
                    f"experiment {exp.experiment_id if exp else '-'} (artifact root "
                    f"{exp.artifact_location if exp else '-'}), {len(runs)} runs; {len(stored)} artifact "
                    "files written through the server")

    def judge(self, experiment: str, log: Path, base_url: str) -> None:
        """The variants' Ray tasks called the endpoint with the key from their node's environment: the
        endpoint answered them, refused none, and refuses a call without the key. Unparseable verdicts
        are the judge model's (counted by the run), not the wiring's."""
        import httpx
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.tracking)
        exp = client.get_experiment_by_name(experiment)
        runs = client.search_runs([exp.experiment_id], "metrics.`judge.pairs` > 0") if exp else []
        m = [r.data.metrics for r in runs]
        text = log.read_text(errors="replace")
        calls = len(re.findall(r'"POST /v1/chat/completions HTTP/1.1" 200', text))
        refused = len(re.findall(r'"POST /v1/chat/completions HTTP/1.1" 4\d\d', text))
        keyless = httpx.get(f"{base_url}/models", timeout=10).status_code
        errors = sum(x.get("judge.errors", 0) for x in m)
        total = {k: sum(x.get(f"judge.{k}", 0) for x in m) for k in ("pairs", "decided", "unparseable")}
        ok = bool(m) and calls > 0 and refused == 0 and errors == 0 and keyless == 401
        self._check("judge endpoint", ok,
                    f"{len(m)} variant runs judged ({total['pairs']:.0f} pairs, {total['decided']:.0f} "
                    f"decided, {total['unparseable']:.0f} verdicts unparseable); the endpoint answered "
                    f"{calls} calls, refused {refused}; endpoint errors {errors:.0f}; a call without the "
                    f"key: HTTP {keyless}")

    def scheduled(self, deployment: str, wait_s: float = 600) -> None:
        """The interval schedule's first run, created by Prefect's scheduler and run by the worker."""
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

        deadline, runs = time.monotonic() + wait_s, []
        with get_client(sync_client=True) as c:
            dep = c.read_deployment_by_name(deployment)
            flt = DeploymentFilter(id=DeploymentFilterId(any_=[dep.id]))
            while time.monotonic() < deadline:
                runs = [r for r in c.read_flow_runs(deployment_filter=flt) if r.auto_scheduled]
                if any(r.state and r.state.is_final() for r in runs):
                    break
                time.sleep(5)
        done = [r for r in runs if r.state and r.state.is_completed()]
        self._check(f"scheduled run of {deployment}", bool(done),
                    f"{len(runs)} scheduled runs, {len(done)} completed"
                    + (f" ({done[0].name}, {self.ui}/runs/flow-run/{done[0].id})" if done else ""))

    def placement(self, dashboard: str, address: str) -> None:
        """Where Ray ran the flow's tasks, from its state API: with two nodes, both took some."""
        import ray
        from ray.util.state import list_tasks

        ray.init(address=address, log_to_driver=False)
        try:
            nodes = {n["NodeID"]: ("head" if "node:__internal_head__" in n["Resources"] else "node-2")
                     for n in ray.nodes() if n["Alive"]}
        finally:
            ray.shutdown()
        ran: dict[str, list[str]] = {name: [] for name in nodes.values()}
        for t in list_tasks(address=dashboard, filters=[("state", "=", "FINISHED")], limit=10_000):
            if t.node_id in nodes and t.type == "NORMAL_TASK":
                ran[nodes[t.node_id]].append(t.name)
        self._check("tasks on every node", all(ran.values()),
                    "; ".join(f"{node}: {len(names)} tasks ({', '.join(sorted(set(names))[:6])})"
                              for node, names in ran.items()))

    def cached(self, first: Any, second: Any, results: Path) -> None:
        """The second run (another worker, another Prefect home) read the first one's task results from
        the result storage that the deployment's environment puts on the shared state dir: each task
        of the second run whose result record is one the first run wrote is Cached (read, not
        recomputed), and every record lies under `results`. Tasks keyed on their flow run (Prefect's
        default policy: cheap steps, reports) run again by design."""
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        def records(run: Any) -> list[tuple[str, str, str]]:
            """(task run name, state name, result record path) of each task run of `run`."""
            with get_client(sync_client=True) as c:
                flt = FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))
                return [(t.name, t.state.name, str(getattr(t.state.data, "storage_key", "")))
                        for t in c.read_task_runs(flow_run_filter=flt, limit=200) if t.state]

        a, b = records(first), records(second)
        written = {key for _, state, key in a if state == "Completed" and key}
        read = [(name, state) for name, state, key in b if key in written]
        elsewhere = [key for _, _, key in a + b if key and not key.startswith(str(results))]
        took = [(r.end_time - r.start_time).total_seconds() for r in (first, second)
                if r.end_time and r.start_time]
        ok = bool(read) and all(state == "Cached" for _, state in read) and not elsewhere
        self._check("task results shared across workers", ok,
                    f"{sum(st == 'Cached' for _, st in read)} of the second run's {len(b)} task runs read "
                    f"the first run's records under {results} (Cached: "
                    f"{', '.join(sorted({n for n, _ in read}))}); {len(b) - len(read)} keyed on their flow "
                    f"run ran again; records elsewhere: {len(elsewhere)}"
                    + (f"; {took[0]:.0f} s then {took[1]:.0f} s" if len(took) == 2 else ""))

    def verdict(self) -> int:
        print("rehearsal: " + ("PASSED" if not self.failed else f"FAILED ({', '.join(self.failed)})"),
              flush=True)
        return 0 if not self.failed else 1
