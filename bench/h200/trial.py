"""Each candidate of a timing run tried once in a process of its own, so that one whose kernels never finish is
left out with a line saying so instead of holding the run (and the device time) until its limit: a hung kernel
cannot be stopped from inside the process that launched it, but that process can be killed. The child
(`python -m bench.h200.trial`, its request on stdin as JSON) runs the candidates in order on the case's first
leaderboard input and reports each on a line as it ends; the parent kills it when a candidate passes limit_s and
starts another for the rest. A candidate the path refuses (a ValueError: a ring too deep for this GPU's shared
memory is refused only at its launch) is left out with its reason, one that fails otherwise with its error's last
line. The kernels the child compiled stay in Triton's cache for the timing that follows."""

from __future__ import annotations

import importlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the child runs a candidate with: a module with make_input(case) and run(data, tiles).
RUNNER = "bench.h200.trial"
REPORT = b"trial report: "  # what starts the child's report lines


def make_input(case: dict):
    from bench.h200.harness import leaderboard_input

    return leaderboard_input(case, 0)


def run(data, tiles) -> None:
    import torch

    from bench.h200.harness import run_tiles

    run_tiles(data, tiles)
    torch.cuda.synchronize()


def tried(case: dict, tiles: dict, limit_s: float, runner: str = RUNNER) -> tuple[dict, list[str]]:
    """(the candidates (name -> tiles) that ran, a line for each left out), each tried once in a child process;
    limit_s: the most a candidate may take, the first's counted from the child's start."""
    left, out, refused = dict(tiles), {}, []
    while left:
        for name, error in _child_reports(case, dict(left), limit_s, runner):
            if error is None:
                out[name] = left.pop(name)
            else:
                del left[name]
                refused.append(f"{name}: {error}")
    return out, refused


def _child_reports(case: dict, tiles: dict, limit_s: float, runner: str):
    """(name, None or why it is left out) for the candidates one child gets through, in order; the child killed at
    the first that passes limit_s or takes the child down."""
    request = {"case": case, "tiles": {name: t.as_dict() for name, t in tiles.items()}, "runner": runner}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile(mode="w+") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.h200.trial"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=ROOT,
            env=env,
        )
        child.stdin.write(json.dumps(request).encode())
        child.stdin.close()
        lines = _Lines(child.stdout)
        for name in tiles:
            line = lines.next_within(limit_s)
            if line is None:
                child.kill()
                child.wait()
                yield name, f"did not finish in {limit_s:g} s (a kernel that never ends, or compiles past the limit)"
                return
            if not line:
                child.wait()
                stderr.seek(0)
                last = (stderr.read().strip().splitlines() or [f"exit status {child.returncode}"])[-1]
                yield name, f"failed and took its process down: {last}"
                return
            yield name, json.loads(line)["error"]
        child.wait()


class _Lines:
    """A pipe's lines, each waited for at most a given time: read unbuffered, since a buffered reader can hold a
    whole line that the wait on the pipe would not see."""

    def __init__(self, pipe):
        self.fd, self.buffer = pipe.fileno(), b""

    def next_within(self, limit_s: float) -> str | None:
        """The next report line ('' once the pipe ends), or None when none comes within limit_s; other lines
        (a library's print) are passed over."""
        deadline = time.monotonic() + limit_s
        with selectors.DefaultSelector() as waiting:
            waiting.register(self.fd, selectors.EVENT_READ)
            while True:
                while b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    if line.startswith(REPORT):
                        return line[len(REPORT) :].decode()
                left = deadline - time.monotonic()
                if left <= 0 or not waiting.select(timeout=left):
                    return None
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    return ""
                self.buffer += chunk


def main() -> int:
    """The child: each candidate of the request run once, a report line (REPORT, then JSON {"name", "error"}) as
    each ends."""
    from moe_triton.tiles import TileConfig

    request = json.loads(sys.stdin.read())
    runner = importlib.import_module(request["runner"])
    data = runner.make_input(request["case"])
    for name, fields in request["tiles"].items():
        error = None
        try:
            runner.run(data, TileConfig.from_dict(fields))
        except ValueError as refusal:
            error = str(refusal)
        except Exception as failure:  # reported as the candidate's, the rest still tried
            error = f"failed: {type(failure).__name__}: {(str(failure).strip().splitlines() or [''])[-1]}"
        print(REPORT.decode() + json.dumps({"name": name, "error": error}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
