"""The local lm-eval suite: every task loads offline, has enough items and a version, and its
scoring reads replies the way the YAML says."""

import importlib.util
import json

import pytest
import yaml

from quantgate.conf.evals import TASKS_DIR
from quantgate.conf.evals.suite import json_object, json_object_anywhere, last_int, token_f1

STATIC = ["qg_facts_mc", "qg_arith", "qg_json_tool"]


def _utils(task):
    spec = importlib.util.spec_from_file_location(f"{task}_utils", TASKS_DIR / task / "utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _replay_file(path, n=3):
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"hi {i}"}],
                                "answer": f"hello {i}", "slices": {"domain": "chat", "lang": "en"}}) + "\n")
    return path


def test_every_task_loads_offline_with_a_version(tmp_path):
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(TASKS_DIR),
                          metadata={"replay_path": str(_replay_file(tmp_path / "r.jsonl"))})
    names = sorted(p.name for p in TASKS_DIR.iterdir() if p.is_dir())
    assert names == ["qg_arith", "qg_facts_mc", "qg_json_tool", "qg_replay"]
    loaded = manager.load(names)["tasks"]
    for name in names:
        task = loaded[name]
        assert yaml.safe_load((TASKS_DIR / name / f"{name}.yaml").read_text().replace("!function", ""))[
            "metadata"]["version"] >= 1
        docs = list(task.test_docs())
        if name in STATIC:
            assert len(docs) >= 100, name
        else:
            assert len(docs) == 3  # the replay file passed as metadata


def test_replay_without_its_file_names_the_metadata_key():
    with pytest.raises(ValueError, match="replay_path"):
        _utils("qg_replay").load()


def test_mc_labels_point_at_the_answer():
    rows = [json.loads(line) for line in (TASKS_DIR / "qg_facts_mc" / "data.jsonl").open()]
    paris = next(r for r in rows if r["question"] == "What is the capital of France?")
    assert paris["choices"][paris["label"]] == "Paris" and len(set(paris["choices"])) == 4


def test_generator_reproduces_the_committed_data(tmp_path, monkeypatch):
    script = TASKS_DIR.parents[2] / "scripts" / "make_eval_tasks.py"
    spec = importlib.util.spec_from_file_location("gen", script)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for name in STATIC:
        (tmp_path / "conf" / "evals" / "tasks" / name).mkdir(parents=True)
    monkeypatch.setattr(gen, "OUT", tmp_path / "conf" / "evals" / "tasks")
    gen.main()
    for name in STATIC:
        assert (gen.OUT / name / "data.jsonl").read_bytes() == (TASKS_DIR / name / "data.jsonl").read_bytes()


def test_answer_parsing():
    assert last_int("9 + 24 = 33") == 33 and last_int("It is 1,200 apples.") == 1200
    assert last_int("no number") is None
    assert json_object('{"a": 1}') == {"a": 1}
    assert json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert json_object('Sure: {"a": 1}') is None  # prose around it is not compliance
    assert json_object_anywhere('Sure: {"a": 1} hope it helps') == {"a": 1}
    assert json_object_anywhere("{broken") is None
    assert token_f1("the cat sat", "the cat sat") == 1.0
    assert token_f1("dog", "the cat") == 0.0
    assert 0 < token_f1("the cat ran", "the cat sat") < 1


def test_tool_call_scoring_levels():
    u = _utils("qg_json_tool")
    doc = {"call": {"tool": "set_timer", "arguments": {"minutes": 5}}}
    exact = u.score(doc, ['{"tool": "set_timer", "arguments": {"minutes": 5}}'])
    assert exact == {"json_only": 1.0, "json_found": 1.0, "schema_valid": 1.0, "call_exact": 1.0}
    wrapped = u.score(doc, ['Here it is: {"tool": "set_timer", "arguments": {"minutes": 5}}'])
    assert wrapped == {"json_only": 0.0, "json_found": 1.0, "schema_valid": 1.0, "call_exact": 1.0}
    wrong = u.score(doc, ['{"tool": "set_timer", "arguments": {"minutes": 6}}'])
    assert wrong["schema_valid"] == 1.0 and wrong["call_exact"] == 0.0
    assert u.score(doc, ["set_timer(5)"])["json_found"] == 0.0
