"""Energy per generated token (J/token): the energy counted over a steady-state decode window (prefill
and warm-up kept outside it) ÷ the tokens generated in that window. Report the batch size with every
figure: J/token falls steeply as the batch grows.

Meters, in order of preference: NVML's total-energy counter (via Zeus if installed, else pynvml) on
GPU; RAPL package + DRAM counters on CPU; else an estimate, CPU time × a stated power per busy core +
a stated base power × wall time. Estimates are not measurements: they carry method "estimated" and a
detail stating the powers assumed."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil


class MeterUnavailable(RuntimeError):
    """This backend cannot measure on this machine; the message says why."""


@dataclass(frozen=True)
class EnergyReading:
    joules: float
    seconds: float  # wall seconds of the window
    method: str  # "nvml" | "rapl" | "estimated"
    detail: str  # which domains/devices, or the stated powers used

    def j_per_token(self, tokens: int) -> float:
        if tokens <= 0:
            raise ValueError(f"tokens must be positive, got {tokens}")
        return self.joules / tokens


class EnergyMeter(Protocol):
    method: str
    detail: str

    def begin(self) -> None: ...
    def end(self) -> EnergyReading: ...  # energy since begin()


class NvmlMeter:
    method = "nvml"

    def __init__(self, gpu_indices: Sequence[int] = (0,)) -> None:
        import torch  # lazily: the CPU meters must not pay for importing it

        if not torch.cuda.is_available():
            raise MeterUnavailable("no CUDA device")
        self._torch, self._indices, self._zeus = torch, list(gpu_indices), None
        try:
            from zeus.monitor import ZeusMonitor
        except ImportError:  # zeus is optional; NVML's counter is read directly below
            ZeusMonitor = None
        if ZeusMonitor is not None:
            try:
                self._zeus = ZeusMonitor(gpu_indices=self._indices, cpu_indices=[])
            except Exception as e:  # zeus raises its own error types for driver/permission problems
                raise MeterUnavailable(f"zeus cannot monitor GPUs {self._indices}: {e}") from e
            self.detail = f"NVML via zeus, GPUs {self._indices}"
            return
        try:
            import pynvml
        except ImportError as e:
            raise MeterUnavailable("neither zeus nor pynvml (nvidia-ml-py) imports") from e
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
            # NVML numbers boards physically, ignoring CUDA_VISIBLE_DEVICES; the UUID torch reports for
            # its visible index names the same board in both.
            uuids = [f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in self._indices]
            self._handles = [pynvml.nvmlDeviceGetHandleByUUID(u) for u in uuids]
            self._read_mj()  # pre-Volta boards have no energy counter: fail here, not mid-run
        except pynvml.NVMLError as e:
            raise MeterUnavailable(f"NVML energy counter unreadable on GPUs {self._indices}: {e}") from e
        self.detail = f"NVML total-energy counter via pynvml, GPUs {self._indices}"

    def _read_mj(self) -> int:
        return sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles)

    def _sync(self) -> None:
        # Kernels run asynchronously: unsynced edges would miss work in flight or charge earlier work.
        for i in self._indices:
            self._torch.cuda.synchronize(i)

    def begin(self) -> None:
        self._sync()
        if self._zeus is not None:
            self._zeus.begin_window("quantgate-energy", sync_execution=False, restart=True)
        else:
            self._mj0 = self._read_mj()
        self._t0 = time.perf_counter()

    def end(self) -> EnergyReading:
        self._sync()
        seconds = time.perf_counter() - self._t0
        if self._zeus is not None:
            m = self._zeus.end_window("quantgate-energy", sync_execution=False)
            joules = float(sum(m.gpu_energy.values()))
        else:
            joules = (self._read_mj() - self._mj0) / 1000.0
        return EnergyReading(joules, seconds, self.method, self.detail)


def _name(zone: Path) -> str:
    return (zone / "name").read_text().strip() if (zone / "name").is_file() else ""


class RaplMeter:
    method = "rapl"

    def __init__(self, root: Path = Path("/sys/class/powercap")) -> None:
        root = Path(root)
        if not root.is_dir():
            raise MeterUnavailable(f"{root} missing")
        packages = sorted((p for p in root.iterdir() if re.fullmatch(r"intel-rapl:\d+", p.name)
                           and _name(p).startswith("package")), key=lambda p: int(p.name.split(":")[1]))
        if not packages:
            raise MeterUnavailable(f"no RAPL package domain (intel-rapl:N named package-*) under {root}")
        # A package domain already contains its core/uncore subzones but not DRAM, so package + dram is
        # the socket without double counting. sysfs lists subzones both flat under /sys/class/powercap
        # and nested in their parent; accept either layout.
        zones: list[Path] = []
        for pkg in packages:
            subs = {p.name: p for p in [*root.glob(f"{pkg.name}:*"), *pkg.glob(f"{pkg.name}:*")]}
            zones += [pkg, *(subs[n] for n in sorted(subs) if _name(subs[n]) == "dram")]
        self._domains: list[tuple[Path, int]] = []  # (energy_uj file, counter range)
        for z in zones:
            try:
                (z / "energy_uj").read_text()
                self._domains.append((z / "energy_uj", int((z / "max_energy_range_uj").read_text())))
            except PermissionError as e:
                raise MeterUnavailable(f"{z / 'energy_uj'} is not readable: needs root "
                                       "(or a udev rule granting read access)") from e
            except (OSError, ValueError) as e:
                raise MeterUnavailable(f"{z}: energy counter not readable ({e})") from e
        self.detail = " + ".join(n if n.startswith("package") else f"{n} ({z.name})"
                                 for z in zones for n in [_name(z)])

    def begin(self) -> None:
        self._uj0 = [int(f.read_text()) for f, _ in self._domains]
        self._t0 = time.perf_counter()

    def end(self) -> EnergyReading:
        uj1 = [int(f.read_text()) for f, _ in self._domains]
        seconds = time.perf_counter() - self._t0
        # The counter wraps at max_energy_range_uj (~262 kJ on most Intel sockets, under 20 min at 250 W):
        # one wrap is recoverable, two within a window are not, so keep windows short.
        total = sum(b - a if b >= a else b + top - a
                    for (_, top), a, b in zip(self._domains, self._uj0, uj1, strict=True))
        return EnergyReading(total / 1e6, seconds, self.method, self.detail)


class EstimatedCpuMeter:
    method = "estimated"

    def __init__(self, watts_per_busy_core: float, base_watts: float) -> None:
        if watts_per_busy_core < 0 or base_watts < 0:
            raise ValueError("stated powers must be non-negative")
        self.watts_per_busy_core, self.base_watts = watts_per_busy_core, base_watts
        self.detail = (f"estimated: {watts_per_busy_core:.1f} W per busy core × CPU-s "
                       f"+ {base_watts:.1f} W × wall s (DRAM/base)")

    def begin(self) -> None:
        # process_time sums every thread of this process (torch's intra-op pool included) but not child
        # processes, so the window must be taken in the process that decodes.
        self._cpu0, self._t0 = time.process_time(), time.perf_counter()

    def end(self) -> EnergyReading:
        cpu_s, seconds = time.process_time() - self._cpu0, time.perf_counter() - self._t0
        joules = cpu_s * self.watts_per_busy_core + self.base_watts * seconds
        detail = (f"estimated: {self.watts_per_busy_core:.1f} W per busy core × {cpu_s:.2f} CPU-s "
                  f"+ {self.base_watts:.1f} W × {seconds:.2f} s (DRAM/base)")
        return EnergyReading(joules, seconds, self.method, detail)


def process_tree_cpu_s(pid: int, seen: dict[int, float] | None = None) -> float:
    """CPU seconds of `pid` and its descendants so far. With `seen` (pid -> last count, kept by the
    caller), a process that has exited keeps its last count instead of dropping out of the sum."""
    seen = {} if seen is None else seen
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            seen[p.pid] = t.user + t.system
    return sum(seen.values())


class ProcessTreeCpuMeter:
    """EstimatedCpuMeter's model over another process's tree (an engine server: it decodes in child
    processes of its own, where our process_time sees nothing of it)."""

    method = "estimated"

    def __init__(self, pid: int, *, watts_per_busy_core: float, base_watts: float) -> None:
        self._pid, self.watts_per_busy_core, self.base_watts = pid, watts_per_busy_core, base_watts
        self.detail = (f"estimated: {watts_per_busy_core:.1f} W per busy core × the process tree's CPU-s"
                       f" + {base_watts:.1f} W × wall s")

    def begin(self) -> None:
        self._seen: dict[int, float] = {}
        self._cpu0, self._t0 = process_tree_cpu_s(self._pid, self._seen), time.perf_counter()

    def end(self) -> EnergyReading:  # since begin(); may be read again and again
        cpu_s = process_tree_cpu_s(self._pid, self._seen) - self._cpu0
        seconds = time.perf_counter() - self._t0
        return EnergyReading(cpu_s * self.watts_per_busy_core + self.base_watts * seconds, seconds,
                             self.method, self.detail)


_KNOWN = ("nvml", "rapl", "estimated")


def select_meter(prefer: Sequence[str], *, watts_per_busy_core: float, base_watts: float,
                 rapl_root: Path = Path("/sys/class/powercap"),
                 gpu_indices: Sequence[int] = (0,)) -> tuple[EnergyMeter, list[str]]:
    """The first meter in `prefer` that works here, and one line per skipped backend saying why."""
    if unknown := [p for p in prefer if p not in _KNOWN]:
        raise ValueError(f"unknown energy meter(s) {unknown}; known: {', '.join(_KNOWN)}")
    skipped: list[str] = []
    for name in prefer:
        try:
            if name == "nvml":
                return NvmlMeter(gpu_indices), skipped
            if name == "rapl":
                return RaplMeter(rapl_root), skipped
            return EstimatedCpuMeter(watts_per_busy_core, base_watts), skipped
        except MeterUnavailable as e:
            skipped.append(f"{name}: {e}")
    raise MeterUnavailable("no energy meter available: " + "; ".join(skipped))
