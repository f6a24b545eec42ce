"""When the judge gets a vote, and the labelled pairs it is measured on."""

import json

import pytest

from quantgate.conf.evals import RELIABILITY_FILE
from quantgate.conf.schema import JudgeConf
from quantgate.tasks.judge import reliability as judge_reliability
from quantgate.tasks.judge.reliability import injected, judge_code_digest, judge_vote, labelled_pairs
from quantgate.tasks.judge.server import JUDGE_SHA256


def test_committed_measurements_are_for_this_judge_and_prompt():
    records = json.loads(RELIABILITY_FILE.read_text())
    assert "text" in records
    for mode, rec in records.items():
        assert rec["mode"] == mode
        assert rec["judge_sha256"] == JUDGE_SHA256 and rec["judge_code"] == judge_code_digest(mode)
        assert rec["pairs"] >= 40


@pytest.fixture
def record(tmp_path, monkeypatch):
    path = tmp_path / "rel.json"
    monkeypatch.setattr(judge_reliability, "RELIABILITY_FILE", path)

    def write(mode="text", **kw):
        rec = {"judge_sha256": JUDGE_SHA256, "judge_code": judge_code_digest(mode), "pairs": 100,
               "agreement": 0.9, "decided_agreement": 1.0, "swap_consistency": 0.9, "mode": mode, **kw}
        path.write_text(json.dumps({mode: rec}))
    return write


def test_vote_follows_the_measured_reliability(record):
    record()
    assert judge_vote(JudgeConf()).counts
    record(decided_agreement=0.7)
    vote = judge_vote(JudgeConf())
    assert not vote.counts and "advisory" in vote.note
    record(swap_consistency=0.58)  # the committed text-mode judge: right when it commits, too seldom
    assert not judge_vote(JudgeConf()).counts
    record(judge_code="something-else")
    assert "another judge model or prompt" in judge_vote(JudgeConf()).note
    assert not judge_vote(JudgeConf(base_url="http://127.0.0.1:1/v1")).counts
    record(mode="rubric")  # a measurement of one mode says nothing of another
    assert not judge_vote(JudgeConf()).counts and "mode 'text'" in judge_vote(JudgeConf()).note
    assert judge_vote(JudgeConf(mode="rubric")).counts
    record(mode="rubric", judge_code=judge_code_digest("text"))
    assert not judge_vote(JudgeConf(mode="rubric")).counts
    # a graded mode records no swap consistency: it is judged on agreement alone
    record(mode="rubric", swap_consistency=None, agreement=0.9, decided_agreement=0.95)
    vote = judge_vote(JudgeConf(mode="rubric"))
    assert vote.counts and "graded alone" in vote.note
    record(mode="rubric", swap_consistency=None, agreement=0.4, decided_agreement=0.4)
    assert not judge_vote(JudgeConf(mode="rubric")).counts


def test_labelled_pairs_are_balanced_and_right():
    pairs = labelled_pairs(100)
    assert len(pairs) == 100 and sum(p.label == "win" for p in pairs) == 50
    answers = {r["id"]: r["answer"] for r in judge_reliability._rows("qg_arith")}
    for p in (p for p in pairs if p.id in answers):
        right, wrong = (p.candidate, p.baseline) if p.label == "win" else (p.baseline, p.candidate)
        assert right == f"The answer is {answers[p.id]}." and wrong != right
    planted = injected(pairs[:4])
    for clean, inj in zip(pairs[:4], planted, strict=True):
        wrong_clean = clean.baseline if clean.label == "win" else clean.candidate
        wrong_inj = inj.baseline if clean.label == "win" else inj.candidate
        assert wrong_inj.startswith(wrong_clean) and len(wrong_inj) > len(wrong_clean)
