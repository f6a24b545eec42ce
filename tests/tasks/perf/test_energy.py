import os
import time

import pytest

from quantgate.tasks.perf.energy import (
    EnergyReading,
    EstimatedCpuMeter,
    MeterUnavailable,
    RaplMeter,
    select_meter,
)

MAX_UJ = 262_143_328_850


ALL = ("nvml", "rapl", "estimated")


def _zone(path, name, energy_uj, max_uj=MAX_UJ):
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")


def _rapl_tree(root, pkg_uj=1_000_000, dram_uj=500_000, max_uj=MAX_UJ):
    _zone(root / "intel-rapl:0", "package-0", pkg_uj, max_uj)
    _zone(root / "intel-rapl:0:0", "dram", dram_uj, max_uj)
    _zone(root / "intel-rapl:0:1", "core", 7)  # inside the package figure already: must not be added
    return root


def test_rapl_sums_package_and_dram_deltas(tmp_path):
    root = _rapl_tree(tmp_path / "powercap")
    meter = RaplMeter(root)
    assert meter.method == "rapl"
    assert meter.detail == "package-0 + dram (intel-rapl:0:0)"
    meter.begin()
    _zone(root / "intel-rapl:0", "package-0", 3_500_000)
    _zone(root / "intel-rapl:0:0", "dram", 750_000)
    _zone(root / "intel-rapl:0:1", "core", 9_999_999)
    reading = meter.end()
    assert reading.joules == pytest.approx(2.5 + 0.25, abs=1e-12)
    assert reading.method == "rapl" and reading.seconds >= 0


def test_rapl_handles_counter_wrap(tmp_path):
    root = _rapl_tree(tmp_path, pkg_uj=999_000, dram_uj=10, max_uj=1_000_000)
    meter = RaplMeter(root)
    meter.begin()
    _zone(root / "intel-rapl:0", "package-0", 500, max_uj=1_000_000)  # wrapped: 1000 uJ to the top + 500
    _zone(root / "intel-rapl:0:0", "dram", 20, max_uj=1_000_000)
    assert meter.end().joules == pytest.approx((1_000 + 500 + 10) / 1e6, abs=1e-12)


def test_rapl_without_package_domain_names_the_path(tmp_path):
    _zone(tmp_path / "intel-rapl:0", "psys", 1)
    with pytest.raises(MeterUnavailable, match=str(tmp_path)):
        RaplMeter(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file anyway: cannot make it unreadable")
def test_rapl_unreadable_counter_says_needs_root(tmp_path):
    root = _rapl_tree(tmp_path)
    (root / "intel-rapl:0" / "energy_uj").chmod(0)
    with pytest.raises(MeterUnavailable, match="needs root"):
        RaplMeter(root)


def test_estimate_charges_cpu_time_and_base_power():
    meter = EstimatedCpuMeter(watts_per_busy_core=4.0, base_watts=20.0)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    meter.begin()
    x = 0
    while time.process_time() - cpu0 < 0.3:
        x += 1
    reading = meter.end()
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    assert reading.method == "estimated"
    assert 0 < reading.seconds <= wall_s
    assert reading.joules >= 20.0 * reading.seconds
    # The meter's window lies inside the test's, which burned at least 0.3 CPU-s inside it.
    assert 4.0 * 0.25 <= reading.joules - 20.0 * reading.seconds <= 4.0 * cpu_s
    assert "4.0 W per busy core" in reading.detail and "20.0 W" in reading.detail


def test_estimate_of_idle_window_is_base_power_only():
    meter = EstimatedCpuMeter(watts_per_busy_core=4.0, base_watts=20.0)
    cpu0 = time.process_time()
    meter.begin()
    time.sleep(0.2)
    reading = meter.end()
    cpu_s = time.process_time() - cpu0
    assert reading.seconds >= 0.2
    assert 0 <= reading.joules - 20.0 * reading.seconds <= 4.0 * cpu_s  # sleeping costs no CPU time


def _has_cuda():
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="checks the CPU-only fallback; this machine has a CUDA device")
def test_select_falls_back_to_estimate_with_reasons(tmp_path):
    meter, skipped = select_meter(ALL, rapl_root=tmp_path / "no-powercap", watts_per_busy_core=3.0,
                                  base_watts=20.0)
    assert isinstance(meter, EstimatedCpuMeter) and meter.method == "estimated"
    assert meter.watts_per_busy_core == 3.0
    assert skipped == ["nvml: no CUDA device", f"rapl: {tmp_path / 'no-powercap'} missing"]


@pytest.mark.skipif(_has_cuda(), reason="nvml must be skipped for rapl to be picked")
def test_select_picks_rapl_after_nvml(tmp_path):
    meter, skipped = select_meter(ALL, rapl_root=_rapl_tree(tmp_path), watts_per_busy_core=4.0,
                                  base_watts=20.0)
    assert isinstance(meter, RaplMeter)
    assert skipped == ["nvml: no CUDA device"]


def test_select_raises_when_nothing_is_available(tmp_path):
    with pytest.raises(MeterUnavailable, match="rapl: .*no-powercap missing"):
        select_meter(("rapl",), rapl_root=tmp_path / "no-powercap", watts_per_busy_core=4.0, base_watts=20.0)


def test_select_rejects_unknown_backend():
    with pytest.raises(ValueError, match="known: nvml, rapl, estimated"):
        select_meter(("rapl", "wattmeter"), watts_per_busy_core=4.0, base_watts=20.0)


def test_j_per_token():
    reading = EnergyReading(joules=12.0, seconds=2.0, method="rapl", detail="package-0")
    assert reading.j_per_token(48) == 0.25
    with pytest.raises(ValueError):
        reading.j_per_token(0)
