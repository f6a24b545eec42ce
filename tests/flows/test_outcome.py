"""A variant whose Ray worker dies fails alone: the flow gets a one-line error, not a crash."""

import os

from prefect import flow, task
from prefect_ray import RayTaskRunner

from quantgate.flows.outcomes import outcome as _outcome


@task
def dies() -> int:
    os._exit(3)  # what an OOM kill looks like from the driver: the worker is just gone


@task
def works() -> int:
    return 7


@flow(task_runner=RayTaskRunner(init_kwargs={"address": "local", "num_cpus": 1, "include_dashboard": False,
                                             "_node_ip_address": "127.0.0.1"}))
def two_tasks() -> tuple[tuple, tuple]:
    a, b = dies.submit(), works.submit()
    return _outcome(a), _outcome(b)


def test_dead_worker_is_an_error_and_the_other_task_finishes():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness():
        (dead_value, dead_err), (value, err) = two_tasks()
    assert dead_value is None and dead_err and "\n" not in dead_err
    assert (value, err) == (7, "")
