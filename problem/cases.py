"""The official case lists (SPEC 4), the CPU pre-run's shape and the cases' labels."""

TESTS = [
    dict(dhidden=4096, dexpert=1024, nroutedexperts=256, nexpertspertoken=8, nsharedexperts=1, bs=8, seed=9371),
    dict(dhidden=7168, dexpert=2048, nroutedexperts=32, nexpertspertoken=8, nsharedexperts=1, bs=32, seed=2291),
    dict(dhidden=4096, dexpert=1536, nroutedexperts=64, nexpertspertoken=6, nsharedexperts=1, bs=128, seed=81934),
]

BENCHMARKS = [
    dict(dhidden=7168, dexpert=256, nroutedexperts=256, nexpertspertoken=8, nsharedexperts=1, bs=16, seed=9371),
    dict(dhidden=7168, dexpert=256, nroutedexperts=256, nexpertspertoken=8, nsharedexperts=1, bs=128, seed=2291),
    dict(dhidden=7168, dexpert=256, nroutedexperts=256, nexpertspertoken=8, nsharedexperts=1, bs=512, seed=81934),
    dict(dhidden=7168, dexpert=512, nroutedexperts=32, nexpertspertoken=8, nsharedexperts=1, bs=16, seed=2291),
    dict(dhidden=7168, dexpert=512, nroutedexperts=32, nexpertspertoken=8, nsharedexperts=1, bs=128, seed=81934),
    dict(dhidden=7168, dexpert=512, nroutedexperts=32, nexpertspertoken=8, nsharedexperts=1, bs=512, seed=81934),
    dict(dhidden=7168, dexpert=2048, nroutedexperts=32, nexpertspertoken=8, nsharedexperts=1, bs=512, seed=81934),
]

# The CPU pre-run's shape (selection/prerun.py, MOE_SELECT=1 under the interpreter): about 2 s per call.
TINY = [dict(dhidden=256, dexpert=256, nroutedexperts=2, nexpertspertoken=1, nsharedexperts=1, bs=4, seed=5)]


def case_name(case: dict) -> str:
    """Short label, e.g. 'H7168-I256-E256+1-k8+1-bs16': the routed experts plus the shared one,
    and the experts per token plus the shared one (total_top_k 9)."""
    shared = f"+{case['nsharedexperts']}" if case["nsharedexperts"] else ""
    return (
        f"H{case['dhidden']}-I{case['dexpert']}-E{case['nroutedexperts']}{shared}"
        f"-k{case['nexpertspertoken']}{shared}-bs{case['bs']}"
    )
