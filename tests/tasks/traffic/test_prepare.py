import json

from quantgate.conf.schema import TrafficConf
from quantgate.tasks.traffic.load import read_requests
from quantgate.tasks.traffic.prepare import prepare_traffic

from factories import mixed_records, write_traffic


def test_prepared_sets_are_written_redacted_and_reused(tmp_path):
    recs = mixed_records(60)
    recs[0]["request"]["messages"][0]["content"] = "reach me at bob@example.com"
    path = write_traffic(tmp_path / "t.jsonl", recs, [b"garbage"])
    conf = TrafficConf(path=path, calibration_size=10, heldout_size=20)
    a = prepare_traffic(conf, tmp_path / "out")
    assert (a.valid, a.quarantined, a.calibration, a.heldout) == (60, 1, 10, 20)
    written = "".join(open(p).read() for p in (a.calibration_path, a.heldout_path))
    assert "bob@example.com" not in written
    assert len(read_requests(tmp_path / "out" / a.heldout_path)) == 20
    assert json.loads(open(a.quarantine_path).read())["line"] == 61
    again = prepare_traffic(conf, tmp_path / "out")
    assert again == a  # same log + config + code -> same folder, read back, not recomputed
    other = prepare_traffic(conf.model_copy(update={"seed": 5}), tmp_path / "out")
    assert other.heldout_path != a.heldout_path
