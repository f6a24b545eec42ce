from pathlib import Path

from quantgate.conf.evals.suite import jsonl_dataset


def load(**_metadata):
    return jsonl_dataset(Path(__file__).with_name("data.jsonl"))
