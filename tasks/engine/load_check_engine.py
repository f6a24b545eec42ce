"""Run by the serving engine's Python, not quantgate's: load each checkpoint as the server would and
compute one token, all in this one process (`load_check.py` starts it and reads its answers).

    <engine python> load_check_engine.py JOBS.json ANSWERS.jsonl

JOBS.json: `[{"name": ..., "log": path, "args": {vLLM engine arguments, as the server gets them}}]`.
A server start-up is two processes that each import vLLM and torch (~8 s of CPU apiece); here they
are imported once and each checkpoint costs its load and one forward (~3 s for a one-layer model).
The engine chooses each layer's kernel, and refuses what it has none for, at load and at the first
forward: the same code the server runs. Per job, ANSWERS gets `{"name", "status": "loading"}` before
and `{"name", "status": "served" | "refused"}` after; while a job runs, this process's output (vLLM's
log, and the traceback of a refusal) goes to the job's log, as a server's goes to its own. A process
that dies mid-job leaves "loading" last: that job's answer.
"""

import gc
import json
import os
import sys
import traceback


def _say(answers, name, status):
    answers.write(json.dumps({"name": name, "status": status}) + "\n")
    answers.flush()


def _output_to(fd):
    """This process's stdout and stderr (vLLM's log, C++ messages, tracebacks) to `fd` from here on."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def main(jobs_path, answers_path):
    import vllm.logger
    from vllm import LLM, SamplingParams
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    with open(jobs_path) as f:
        jobs = json.load(f)
    own_output = os.dup(1)
    with open(answers_path, "a") as answers:
        for job in jobs:
            _say(answers, job["name"], "loading")
            # vLLM logs some lines once per process (its kernel choices among them): once per job here
            for once in ("_print_debug_once", "_print_info_once", "_print_warning_once"):
                getattr(getattr(vllm.logger, once, None), "cache_clear", lambda: None)()
            log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            _output_to(log)
            llm, status = None, "served"
            try:
                llm = LLM(**job["args"])
                llm.generate([[0, 0]], SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
            except Exception:  # the engine's refusal: its words to the job's log, then the next job
                status = "refused"
                traceback.print_exc()
            finally:
                del llm
                gc.collect()
                cleanup_dist_env_and_memory()
                _output_to(own_output)
                os.close(log)
            _say(answers, job["name"], status)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
