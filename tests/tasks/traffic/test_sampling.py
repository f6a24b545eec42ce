from collections import Counter

import pytest

from quantgate.tasks.traffic.load import load_traffic
from quantgate.tasks.traffic.sampling import stratified_split

from factories import mixed_records, record, write_traffic


@pytest.fixture
def requests(tmp_path):
    recs = mixed_records(300, seed=1)
    recs += [record(1000 + i, prompt="the same prompt") for i in range(10)]  # repeated prompt
    path = write_traffic(tmp_path / "t.jsonl", recs)
    return load_traffic(path, max_line_bytes=65536, length_buckets=(200, 800)).requests


def test_split_is_disjoint_by_id_and_prompt(requests):
    s = stratified_split(requests, calibration_size=60, heldout_size=100, seed=3)
    assert len(s.heldout) == 100 and len(s.calibration) == 60
    assert not {r.id for r in s.heldout} & {r.id for r in s.calibration}
    assert not {r.prompt_text() for r in s.heldout} & {r.prompt_text() for r in s.calibration}


def test_split_is_proportional_per_stratum(requests):
    s = stratified_split(requests, calibration_size=60, heldout_size=150, seed=3)
    pop = Counter((r.slices["tenant"], r.slices["domain"]) for r in requests)
    held = Counter((r.slices["tenant"], r.slices["domain"]) for r in s.heldout)
    for key, n in pop.items():
        assert abs(held[key] - 150 * n / len(requests)) <= 1, key


def test_seed_decides_the_sample(requests):
    ids = lambda s: [r.id for r in s.heldout]  # noqa: E731
    a = stratified_split(requests, calibration_size=20, heldout_size=50, seed=1)
    b = stratified_split(requests, calibration_size=20, heldout_size=50, seed=1)
    c = stratified_split(requests, calibration_size=20, heldout_size=50, seed=2)
    assert ids(a) == ids(b) and ids(a) != ids(c)


def test_asking_for_more_than_exists_names_the_keys(requests):
    with pytest.raises(ValueError, match="calibration_size \\+ traffic.heldout_size"):
        stratified_split(requests, calibration_size=300, heldout_size=300, seed=0)
