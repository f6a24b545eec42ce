"""Which lm-eval tasks exist, for validating `lmeval.tasks` at config load without importing
lm-eval (seconds) or indexing its tasks (TaskManager: tens of seconds).

Local tasks are the folders of `conf/evals/tasks` (their metrics read from `metric_list`);
built-in ones are the `task:`, `group:` and `tag:` names in lm-eval's packaged YAMLs, scanned
only when a name is not local."""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path

from quantgate.conf.evals import TASKS_DIR

_TASK = re.compile(r"^task:\s*(\S+)\s*$", re.M)
_METRIC = re.compile(r"\{\s*metric:\s*(\w+)")
_NAMED = re.compile(r"^(?:task|group|tag):\s*(.+?)\s*$", re.M)


@cache
def local_tasks() -> dict[str, tuple[str, ...]]:
    """{task name: its metric names} of the shipped suite."""
    tasks = {}
    for path in sorted(TASKS_DIR.glob("*/*.yaml")):
        text = path.read_text(encoding="utf-8")
        if found := _TASK.search(text):
            tasks[found.group(1)] = tuple(_METRIC.findall(text))
    return tasks


@cache
def builtin_tasks() -> frozenset[str]:
    """Task, group and tag names lm-eval ships (empty when lm-eval is not installed)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    names: set[str] = set()
    for path in (Path(spec.submodule_search_locations[0]) / "tasks").rglob("*.yaml"):
        for value in _NAMED.findall(path.read_text(encoding="utf-8", errors="replace")):
            if value.startswith("["):
                names.update(v.strip(" '\"") for v in value.strip("[]").split(","))
            elif not value.startswith("!"):
                names.add(value.strip("'\""))
    return frozenset(names)


def unknown_tasks(names: tuple[str, ...]) -> list[str]:
    """The names that are neither local nor lm-eval built-ins."""
    missing = [n for n in names if n not in local_tasks()]
    return [n for n in missing if n not in builtin_tasks()] if missing else []
