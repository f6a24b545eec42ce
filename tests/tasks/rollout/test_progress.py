"""What the rollout does next, read from its log: after a kill at any point, the same answer."""

from quantgate.tasks.rollout.log import RolloutLog
from quantgate.tasks.rollout.progress import next_action

STEPS = (5.0, 25.0, 50.0, 100.0)


def log_of(tmp_path, *events: tuple[str, dict]) -> RolloutLog:
    log = RolloutLog(tmp_path / "r" / "log.jsonl")
    log.append("started", context={}, steps=list(STEPS))
    for event, data in events:
        log.append(event, **data)
    return RolloutLog.read(log.path)  # read back, as a resumed process does


def test_fresh_rollout_starts_at_the_first_step(tmp_path):
    assert next_action(log_of(tmp_path), STEPS).kind == "step"


def test_killed_mid_step_redoes_that_step(tmp_path):
    a = next_action(log_of(tmp_path, ("step", {"step": 1, "weight": 0.25}),
                           ("window", {"step": 1})), STEPS)
    assert (a.kind, a.step) == ("step", 1)


def test_passed_goes_on_failed_rolls_back_inconclusive_pauses(tmp_path):
    def after(outcome: str, k: int = 1):
        return next_action(log_of(tmp_path / outcome / str(k), ("step", {"step": k}),
                                  ("decision", {"step": k, "outcome": outcome, "reason": "r"})), STEPS)

    assert (after("passed").kind, after("passed").step) == ("step", 2)
    assert after("passed", 3).kind == "promote"
    assert after("failed").kind == "rollback"
    assert after("inconclusive").kind == "pause"


def test_killed_while_promoting_or_rolling_back_finishes_it(tmp_path):
    assert next_action(log_of(tmp_path / "p", ("promoting", {"reason": "r"})), STEPS).kind == "promote"
    assert next_action(log_of(tmp_path / "b", ("rolling_back", {"reason": "r"})), STEPS).kind == "rollback"
    done = log_of(tmp_path / "d", ("rolling_back", {"reason": "r"}), ("rolled_back", {"reason": "r"}))
    assert done.finished and next_action(done, STEPS).kind == "done"


def test_a_person_decides(tmp_path):
    paused = ("paused", {"step": 2, "reason": "r"})
    assert next_action(log_of(tmp_path / "a", paused), STEPS).kind == "pause"
    for choice, kind in (("promote", "promote"), ("rollback", "rollback"), ("extend", "step")):
        a = next_action(log_of(tmp_path / choice, paused, ("resumed", {"step": 2, "choice": choice})), STEPS)
        assert (a.kind, a.step) == (kind, 2)


def test_a_line_cut_by_a_kill_is_ignored(tmp_path):
    log = log_of(tmp_path, ("step", {"step": 0}))
    with log.path.open("a") as f:
        f.write('{"seq": 2, "event": "decis')
    assert next_action(RolloutLog.read(log.path), STEPS).kind == "step"
