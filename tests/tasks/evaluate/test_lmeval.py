"""lm-eval through our runner on a tiny model: every local task runs offline, per-item
results carry their traffic slice, unreachable built-in tasks are skipped, unknown ones fail."""

import json

import pytest

from quantgate.tasks.evaluate.lmeval import LmEvalTaskError, _load_tasks, read_lmeval, run_lmeval

from factories import mixed_records


@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    from quantgate.tasks.traffic.load import Request, write_requests

    recs = mixed_records(12)
    reqs = [Request(r["id"], r["request"]["messages"], r["response"]["choices"][0]["message"]["content"],
                    {"tenant": r["tenant"], "domain": r["labels"]["domain"], "lang": r["labels"]["lang"],
                     "length": "short"}) for r in recs]
    path = tmp_path_factory.mktemp("lm") / "heldout.jsonl"
    write_requests(path, reqs)
    return path


def test_suite_runs_on_a_tiny_model(tiny_model, heldout, tmp_path):
    result = run_lmeval(tiny_model, str(tmp_path / "out"),
                        tasks=["qg_facts_mc", "qg_arith", "qg_json_tool", "qg_replay"],
                        replay_path=str(heldout), replay_size=6, batch_size=4, limit=4)
    for metric in ("qg_facts_mc.acc", "qg_arith.exact_match", "qg_json_tool.json_found",
                   "qg_json_tool.call_exact", "qg_replay.token_f1"):
        assert 0.0 <= result.metrics[metric] <= 1.0, metric
    rows = [json.loads(line) for line in open(result.samples_path)]
    assert len([r for r in rows if r["task"] == "qg_facts_mc"]) == 4
    replay = [r for r in rows if r["task"] == "qg_replay"]
    assert len(replay) == 4 and all(r["slices"]["domain"] and isinstance(r["reply"], str) for r in replay)
    assert all(r["prompt"] for r in replay)
    assert any(k.startswith("domain=") for k in result.slices["qg_replay.token_f1"])
    assert read_lmeval(str(tmp_path / "out" / "lmeval.json")) == result


def test_unreachable_builtin_task_is_skipped_with_the_reason():
    tasks, skipped = _load_tasks(["gsm8k"], {})
    assert tasks == {} and "data not reachable" in skipped["gsm8k"]


def test_unknown_task_is_a_config_error():
    with pytest.raises(LmEvalTaskError, match="^lmeval.tasks: unknown lm-eval task 'qg_nope'"):
        _load_tasks(["qg_nope"], {})


def test_replay_items_cover_every_stratum_not_the_head(tmp_path):
    from quantgate.tasks.evaluate.lmeval import _write_replay, spread

    assert spread(10, 3) == [0, 3, 6] and spread(3, 5) == [0, 1, 2]
    grouped = tmp_path / "heldout.jsonl"  # held-out files come grouped by stratum
    with grouped.open("w") as f:
        for tenant in ("acme", "globex", "initech"):
            for i in range(40):
                f.write(json.dumps({"id": f"{tenant}-{i}", "messages": [{"role": "user", "content": "q"}],
                                    "answer": "a", "slices": {"tenant": tenant}}) + "\n")
    _write_replay(grouped, tmp_path / "replay.jsonl", 30)
    rows = [json.loads(line) for line in (tmp_path / "replay.jsonl").open()]
    assert len(rows) == 30
    assert {r["slices"]["tenant"] for r in rows} == {"acme", "globex", "initech"}
