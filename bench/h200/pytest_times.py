"""A pytest plugin for the device runs (`python -m pytest -p bench.h200.pytest_times`): each test's
outcome and duration appended to the file $PYTEST_TIMES as it finishes, so that a suite cut short
by the device's time limit still says where its time went."""

import os


def pytest_runtest_logreport(report):
    path = os.environ.get("PYTEST_TIMES")
    if path and (report.when == "call" or report.duration > 0.5 or report.outcome != "passed"):
        with open(path, "a") as f:
            f.write(f"{report.duration:.2f}\t{report.when}\t{report.outcome}\t{report.nodeid}\n")
