import json
from collections import Counter
from pathlib import Path

import pytest

from quantgate.conf.load import load_config
from quantgate.tasks.traffic.load import TrafficError, load_traffic

from factories import mixed_records, record, write_traffic

BUCKETS = (200, 800)


def _load(path, limit=64 * 1024):
    return load_traffic(path, max_line_bytes=limit, length_buckets=BUCKETS)


def test_bad_lines_are_quarantined_with_line_and_reason(tmp_path):
    good = [record(i) for i in range(3)]
    bad = [
        b'{"id": "x", "ts": ',  # truncated
        b"[1, 2]",
        json.dumps({**record(10), "tenant": 7}).encode(),
        json.dumps({**record(11), "request": {"messages": []}}).encode(),
        b'{"id": "\xff\xfe"}',
        json.dumps(record(1)).encode(),  # duplicate id
        json.dumps({**record(12), "ts": "yesterday"}).encode(),
        b"x" * 5000,
    ]
    loaded = _load(write_traffic(tmp_path / "t.jsonl", good, bad), limit=4096)
    assert len(loaded.requests) == 3
    reasons = {q.line: q.reason for q in loaded.quarantined}
    assert sorted(reasons) == list(range(4, 12))
    assert reasons[4].startswith("not JSON")
    assert reasons[5] == "not a JSON object (got list)"
    assert reasons[6].startswith("tenant:")
    assert reasons[7].startswith("request.messages:")
    assert reasons[8].startswith("not UTF-8")
    assert reasons[9] == "id: duplicate id 'r-00001'"
    assert reasons[10].startswith("ts:")
    assert "over traffic.max_line_bytes=4096" in reasons[11]


def test_pii_is_redacted_in_requests_and_quarantine_excerpts(tmp_path):
    rec = record(0, prompt="Mail me at jane.doe@example.com from 10.1.2.3",
                 answer="Card 4111 1111 1111 1111 noted.")
    bad = json.dumps({**record(1, prompt="call +1 415 555 0132"), "tenant": 3}).encode()
    loaded = _load(write_traffic(tmp_path / "t.jsonl", [rec], [bad]))
    (r,) = loaded.requests
    text = r.prompt_text() + r.answer + loaded.quarantined[0].excerpt
    for secret in ("jane.doe@example.com", "10.1.2.3", "4111 1111 1111 1111", "415 555 0132"):
        assert secret not in text
    assert loaded.pii["email"] == 1 and loaded.pii["card"] == 1


def test_missing_labels_are_inferred_and_marked(tmp_path):
    recs = [record(0, labels=False, prompt="¿Cuántos libros tiene Ana si compra 3 más?"),
            record(1, labels=False, prompt="Write a python function to reverse a string")]
    a, b = _load(write_traffic(tmp_path / "t.jsonl", recs)).requests
    assert (a.slices["domain"], a.slices["lang"]) == ("math", "es")
    assert (b.slices["domain"], b.slices["lang"]) == ("code", "en")
    assert set(a.inferred) == {"domain", "lang"}


def test_completions_form_and_length_buckets(tmp_path):
    rec = record(0)
    rec["request"] = {"model": "m", "prompt": "p" * 900}
    rec["response"] = {"choices": [{"text": "answer"}]}
    (r,) = _load(write_traffic(tmp_path / "t.jsonl", [rec])).requests
    assert r.messages == [{"role": "user", "content": "p" * 900}]
    assert r.slices["length"] == "long"


def test_no_valid_request_is_an_error(tmp_path):
    with pytest.raises(TrafficError, match="no valid request"):
        _load(write_traffic(tmp_path / "t.jsonl", [], [b"nope"]))
    with pytest.raises(TrafficError, match="does not exist"):
        _load(tmp_path / "missing.jsonl")


def test_shipped_demo_log_meets_its_contract():
    path = load_config().traffic.path
    loaded = _load(Path(path))
    assert len(loaded.requests) >= 1500
    count = lambda key: Counter(r.slices[key] for r in loaded.requests)  # noqa: E731
    assert len(count("tenant")) >= 3
    assert {"code", "json_tool", "math", "support"} <= set(count("domain"))
    assert len(count("domain")) >= 5 and len(count("lang")) >= 2
    assert 5 <= len(loaded.quarantined) <= 30
    assert sum(loaded.pii.values()) >= 50
    assert any(r.inferred for r in loaded.requests)


def test_mixed_factory_loads_cleanly(tmp_path):
    loaded = _load(write_traffic(tmp_path / "t.jsonl", mixed_records(30)))
    assert len(loaded.requests) == 30 and not loaded.quarantined


def test_excerpts_are_redacted_whole_then_cut_never_leaving_a_prefix(tmp_path):
    # A bad line whose e-mail straddles the excerpt's cut: cutting first would keep "jane.doe@exa".
    pad = "x" * (300 - len('{"id": ') - 12)
    line = ('{"id": ' + pad + ' jane.doe@example.com and more').encode()
    loaded = _load(write_traffic(tmp_path / "t.jsonl", [record(0)], [line]))
    (q,) = loaded.quarantined
    assert len(q.excerpt) <= 300 and "jane" not in q.excerpt and "@" not in q.excerpt
    assert not q.excerpt.endswith(("[", "[EM", "[EMAIL"))  # no partial placeholder either


def test_ids_tenants_and_labels_never_carry_pii_into_slice_names(tmp_path):
    recs = [{**record(0), "id": "jane.doe@example.com", "tenant": "bob@corp.example.com"},
            {**record(1), "tenant": "bob@corp.example.com",
             "labels": {"domain": "call +1 415 555 0132", "lang": "en"}},
            {**record(2), "tenant": "team with spaces"}]
    loaded = _load(write_traffic(tmp_path / "t.jsonl", recs))
    a, b, c = loaded.requests
    dump = json.dumps([[r.id, r.slices] for r in loaded.requests])
    for secret in ("jane", "bob", "415", "spaces"):
        assert secret not in dump
    assert a.id.startswith("h-") and a.slices["tenant"] == b.slices["tenant"]  # stable: one slice
    assert b.slices["domain"].startswith("h-") and c.slices["tenant"].startswith("h-")
    assert a.slices["tenant"] != c.slices["tenant"]
    assert loaded.pii["email"] >= 3 and loaded.pii["phone"] >= 1


def _call(name, arguments):
    return {"id": f"call-{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_calls_are_accepted_and_their_arguments_redacted(tmp_path):
    rec = record(0)
    rec["request"]["messages"] = [
        {"role": "system", "content": "Admin contact: ops@example.org"},
        {"role": "user", "content": "Find orders for +33 6 12 34 56 78 (415) 555-3004"},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("find_orders", '{"email": "jane.doe@example.com"}')]},
        {"role": "tool", "content": "[]"}]
    answer = {"role": "assistant", "content": None, "tool_calls": [_call("notify", '{"ip": "10.1.2.3"}')]}
    rec["response"] = {"choices": [{"message": answer}]}
    (r,) = _load(write_traffic(tmp_path / "t.jsonl", [rec])).requests
    text = json.dumps(r.messages) + r.answer
    for secret in ("ops@", "jane.doe", "10.1.2.3", "555-3004", "12 34 56 78"):
        assert secret not in text
    assert '"name": "find_orders"' in r.messages[2]["content"] and "notify" in r.answer
    assert r.messages[1]["content"] == "Find orders for [PHONE] [PHONE]"
