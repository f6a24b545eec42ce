"""Load benchmark of the serving layer (not a test): the Ray Serve app on 127.0.0.1 with the old
hand-written generation loop as its champion arm, then with the vLLM engine server, side by side in
one run, at concurrency 1, 4, 16 and 32; then the engine's champion split 50/50 with a canary arm.
Per cell: requests/s, p50/p95/p99 latency, error rate, and every request accounted for (answered,
refused with a status, or lost). A last cell kills the champion arm's replica (SIGKILL) mid-run: the
controller replaces it (a new engine) and the loss is counted.

    .venv/bin/python bench/serving_load.py [--canary NAME] [--requests 16,32,48,64] [--max-tokens 16]

Champion: the baseline checkpoint (from the newest run, else the model resolved from the config);
canary: `--canary NAME`, a checkpoint of the newest run, else a copy of the baseline (then the split
measures the router and a second deployment, not a variant's speed). Traffic: the held-out requests
of the config's traffic, redacted as a run prepares them. Loopback only, bounded in count and time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

from quantgate.tasks.runtime.servers import configure_process_env, ray_cluster

# Loopback only and telemetry off, set before Ray is imported (it reads them at import).
ENV = configure_process_env(Path(".quantgate"), offline=True)

from quantgate.conf.load import load_config  # noqa: E402
from quantgate.tasks.model.source import resolve_model  # noqa: E402
from quantgate.tasks.registry.run_record import read_run_record  # noqa: E402
from quantgate.tasks.runtime.child_process import free_port  # noqa: E402
from quantgate.tasks.serving import app  # noqa: E402
from quantgate.tasks.serving.metrics import cluster_metrics  # noqa: E402
from quantgate.tasks.serving.replayer import ReplayResult, replay  # noqa: E402
from quantgate.tasks.traffic.load import read_requests  # noqa: E402
from quantgate.tasks.traffic.prepare import prepare_traffic  # noqa: E402


def _checkpoints(state: Path, model_name: str, canary: str | None) -> tuple[str, str, str]:
    """(champion path, canary path, canary label)."""
    try:
        record = read_run_record(state)
        base, ckpts = record["model"]["path"], record["checkpoints"]
    except (FileNotFoundError, LookupError):
        base, ckpts = resolve_model(model_name, state / "models").path, {}
    if canary is None:
        return base, base, "baseline (second deployment)"
    if canary not in ckpts:
        raise SystemExit(f"--canary {canary}: no checkpoint in the newest run under {state}; "
                         f"it has {sorted(ckpts)}")
    return base, ckpts[canary], canary


def _row(label: str, conc: int, r: ReplayResult, extra: str = "") -> dict:
    q = r.latency_quantiles()
    st = r.statuses
    ok = st.get("200", 0)
    refused = sum(v for k, v in st.items() if k not in ("200", "lost"))
    return {"setup": label, "concurrency": conc, "sent": len(r.sent), "answered": ok, "refused": refused,
            "lost": st.get("lost", 0), "error_rate": (len(r.sent) - ok) / max(1, len(r.sent)),
            "req_s": ok / r.wall_s if r.wall_s else 0.0, "p50_s": q[0.5], "p95_s": q[0.95], "p99_s": q[0.99],
            "wall_s": r.wall_s, "statuses": st, "arms": _arms(r), "note": extra}


def _arms(r: ReplayResult) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in r.sent:
        out[s.arm or "-"] = out.get(s.arm or "-", 0) + 1
    return out


def _replica_pid(app_name: str, role: str) -> int:
    from ray import serve

    return serve.get_deployment_handle(role, app_name).info.remote().result(timeout_s=60)["pid"]


def _kill_later(app_name: str, delay_s: float) -> threading.Thread:
    def kill() -> None:
        time.sleep(delay_s)
        os.kill(_replica_pid(app_name, "champion"), signal.SIGKILL)

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


def _measure(args: argparse.Namespace, setups: list[tuple[str, app.ServingSpec, float]],
             prompts: list[list[dict[str, str]]]) -> tuple[list[dict], dict]:
    concs = [int(c) for c in args.concurrency.split(",")]
    counts = [int(n) for n in args.requests.split(",")]
    rows, url = [], ""
    for i, (label, spec, weight) in enumerate(setups):
        if i and setups[i - 1][1].app_name != spec.app_name:  # one app on the proxy's "/" at a time
            app.shutdown(setups[i - 1][1].app_name)
        t0 = time.perf_counter()
        url = app.deploy(spec, weight=weight)
        print(f"[bench] {label}: deployed in {time.perf_counter() - t0:.0f} s (engine start-ups "
              f"included, never in a latency) at {url}", flush=True)
        model = spec.model_names[0]
        replay(url, prompts, model=model, max_requests=2, max_tokens=args.max_tokens)  # warm-up, not counted
        for conc, n in zip(concs, counts, strict=True):
            r = replay(url, prompts, model=model, concurrency=conc, max_requests=n, max_s=args.max_s,
                       max_tokens=args.max_tokens)
            rows.append(row := _row(label, conc, r))
            print(f"[bench] {label} c={conc}: {row['req_s']:.2f} req/s, p50 {row['p50_s']:.2f} s, "
                  f"p95 {row['p95_s']:.2f} s, {row['statuses']}", flush=True)
    # The last setup again at the middle concurrency, its champion replica killed 5 s in.
    _, spec, _ = setups[-1]
    conc, n = concs[len(concs) // 2], counts[len(counts) // 2] * 2
    before = _replica_pid(spec.app_name, "champion")
    killer = _kill_later(spec.app_name, 5.0)
    r = replay(url, prompts, model=spec.model_names[0], concurrency=conc, max_requests=n,
               max_s=args.max_s * 2, max_tokens=args.max_tokens)
    killer.join()
    after = _replica_pid(spec.app_name, "champion")
    note = f"champion replica pid {before} killed (SIGKILL); replaced by pid {after}"
    rows.append(row := _row(f"{setups[-1][0]}, champion replica killed at +5 s", conc, r, note))
    print(f"[bench] kill: {note}; {row['statuses']}", flush=True)
    time.sleep(12)  # replicas report to the node's metrics agent every few seconds
    return rows, cluster_metrics(spec.app_name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path)
    ap.add_argument("--canary", help="a variant of the newest run for the split (default: a baseline copy)")
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--requests", default="16,32,48,64", help="requests per cell, per concurrency")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-s", type=float, default=120, help="time bound per cell")
    ap.add_argument("--out", type=Path, default=Path("bench-serving.json"))
    args = ap.parse_args()
    config = load_config(args.config)
    state = Path(config.runtime.state_dir).resolve()  # Ray workers start elsewhere: no relative paths
    champion, canary, canary_label = _checkpoints(state, config.model.name, args.canary)
    traffic = prepare_traffic(config.traffic, state / "traffic")
    prompts = [r.messages for r in read_requests(Path(traffic.heldout_path))]
    s = config.rollout.serving
    name = config.model.served_name or config.model.name
    engine = config.engine.model_dump(mode="json")
    base = app.ServingSpec(app_name="bench-serving", model_names=(name,), log_dir=str(state / "bench-logs"),
                           champion=app.ArmSpec("champion", "0", champion), port=free_port(),
                           replica_cpus=s.replica_cpus, engine=engine, state_dir=str(state.resolve()))
    # The old loop on the same threads, in fp32 (its own fast path for quantized checkpoints).
    loop = replace(base, app_name="bench-loop", arm_backend="loop",
                   engine={"threads": config.engine.threads, "dtype": "float32"})
    split = replace(base, canary=app.ArmSpec("canary", "0", canary))
    from ray import serve

    with ray_cluster(address="local", num_cpus=2, env=ENV, state_dir=state):
        try:
            rows, ray_metrics = _measure(args, [("old loop, champion alone", loop, 0.0),
                                                ("vLLM engine, champion alone", base, 0.0),
                                                (f"vLLM engines, 50/50 with {canary_label}", split, 0.5)],
                                         prompts)
        finally:
            serve.shutdown()
    args.out.write_text(json.dumps({"rows": rows, "ray_serve_metrics": ray_metrics,
                                    "max_tokens": args.max_tokens, "cpus": os.cpu_count(),
                                    "load_avg": os.getloadavg()}, indent=1))
    print("\n| setup | concurrency | sent | answered | refused | lost | req/s | p50 s | p95 s | p99 s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['setup']} | {x['concurrency']} | {x['sent']} | {x['answered']} | {x['refused']} | "
              f"{x['lost']} | {x['req_s']:.2f} | {x['p50_s']:.2f} | {x['p95_s']:.2f} | {x['p99_s']:.2f} |")
    print(f"\nRay Serve's own figures (app {base.app_name}, whole run): {json.dumps(ray_metrics)}")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
