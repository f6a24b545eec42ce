"""The local lm-eval task suite: task YAMLs and their data under `tasks/<name>/`."""

from pathlib import Path

TASKS_DIR = Path(__file__).parent / "tasks"
# What bench/judge_reliability.py measured for the packaged judge (gate reads it).
RELIABILITY_FILE = Path(__file__).parent / "judge_reliability.json"
