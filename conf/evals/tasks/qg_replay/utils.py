from quantgate.conf.evals.suite import jsonl_dataset, token_f1


def load(replay_path=None, **_metadata):
    if not replay_path:
        raise ValueError("qg_replay needs metadata replay_path: the held-out traffic JSONL")
    return jsonl_dataset(replay_path)


def prompt(doc):
    # lm-eval sends one user turn; earlier turns of a conversation are kept as its text.
    turns = doc["messages"]
    if len(turns) == 1:
        return turns[0]["content"]
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in turns)


def score(doc, results):
    return {"token_f1": token_f1(results[0], doc["answer"])}
