"""The instructions one program of a kernel runs, from its branches alone (AMDGCN or SASS, as a list of
Instruction): the shortest path from the entry to an exit that enters every loop it meets, each once.

Why the shortest: a kernel whose programs take different roles (the prep kernels: a few count the
histogram, all the others quantize) runs one role's branch per program, and the many take the short
one; the static text holds both. Why loops are entered: a loop's guard (a forward branch over the whole
loop) is never taken by these kernels (their loops run at least once), and its body counts once (the
trip count is a runtime value). A forward branch that jumps over a loop is therefore no edge.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Instruction:
    text: str
    target: int | None = None  # index of the instruction a branch goes to
    conditional: bool = False  # a branch or exit that may fall through
    exit: bool = False


def shortest_path(code: list[Instruction]) -> list[str]:
    """The instructions of that path, in order (module docstring); the whole text if no exit is reached."""
    loops = [(c.target, i) for i, c in enumerate(code) if c.target is not None and c.target <= i]
    inf = len(code) + 1
    cost = [inf] * (len(code) + 1)
    came = [-1] * (len(code) + 1)
    cost[0] = 0
    best, best_at = inf, -1
    for i, c in enumerate(code):
        if cost[i] >= inf:
            continue
        here = cost[i] + 1
        if c.exit:
            if here < best:
                best, best_at = here, i
            if not c.conditional:
                continue
        if c.target is not None and c.target > i:
            skips_loop = any(i < head and end < c.target for head, end in loops)
            if not skips_loop and here < cost[c.target]:
                cost[c.target], came[c.target] = here, i
            if not c.conditional:
                continue
        elif c.target is not None and not c.conditional:
            continue  # an unconditional backward branch: the loop is left by its other exits
        if i + 1 < len(code) and here < cost[i + 1]:
            cost[i + 1], came[i + 1] = here, i
    if best_at < 0:
        return [c.text for c in code]
    path, at = [], best_at
    while at >= 0:
        path.append(code[at].text)
        at = came[at]
    return path[::-1]
