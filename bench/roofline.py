"""Roofline floor of one call from its actual routing, and the device's measured ceilings (SPEC 6).

Bytes: every expert hit at least once (distinct ids in topk_ids, shared experts included) brings
its fp4 weights and e8m0 scales of gate_up [2I, H] and down [H, I] in once: 3*I*H*(1/2 + 1/32)
bytes; plus the activations (hidden_states in, the bf16 output out) and the routing tensors.
Flops: 2 * M * topk * 3 * I * H (gate_up is 2*I*H multiply-adds per token-slot, down I*H).
Floor = max(bytes / copy bandwidth, flops / bf16 matmul rate), the bandwidth counting read plus
write of a device copy and the rate that of an 8192^3 bf16 matmul, both measured once per device
and cached in a small JSON file (MOE_MXFP4_CACHE_DIR, default ~/.cache/moe-mxfp4/ceilings.json).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

MX_BLOCK = 32
GPU_COPY_BYTES = 1 << 30
GPU_MATMUL_N = 8192
CPU_COPY_BYTES = 256 << 20


def expert_bytes(d_hidden: int, d_expert: int) -> float:
    """fp4 weights (half a byte each) and e8m0 scales (one per 32) of one expert's gate_up and down."""
    elements = 3 * d_expert * d_hidden
    return elements / 2 + elements / MX_BLOCK


def traffic(data) -> dict:
    """Bytes and flops of one call on this input tuple, from its routing."""
    import torch

    hidden, *_rest = data
    topk_weights, topk_ids, config = data[9], data[10], data[11]
    m, h = hidden.shape
    hp, ip = int(config["d_hidden_pad"]), int(config["d_expert_pad"])
    topk = int(topk_ids.shape[1])
    hit = int(torch.unique(topk_ids).numel())
    weight_bytes = hit * expert_bytes(hp, ip)
    act_bytes = (
        m * h * hidden.element_size()
        + m * h * 2
        + topk_ids.numel() * topk_ids.element_size()
        + topk_weights.numel() * topk_weights.element_size()
    )
    return {
        "experts_hit": hit,
        "weight_bytes": float(weight_bytes),
        "act_bytes": float(act_bytes),
        "bytes": float(weight_bytes + act_bytes),
        "flops": float(2 * m * topk * 3 * ip * hp),
    }


@dataclass
class Ceilings:
    bandwidth: float  # bytes / s (device copy, read + write)
    matmul: float  # flop / s (bf16 matmul)
    device: str
    source: str  # measured | cache | given

    def as_dict(self) -> dict:
        return asdict(self)


def floor_ns(bytes_: float, flops: float, ceilings: Ceilings) -> tuple[float, str]:
    """(floor in ns, 'memory' or 'compute')."""
    t_mem = bytes_ / ceilings.bandwidth * 1e9
    t_cmp = flops / ceilings.matmul * 1e9
    return (t_mem, "memory") if t_mem >= t_cmp else (t_cmp, "compute")


def cache_path() -> Path:
    base = os.environ.get("MOE_MXFP4_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "moe-mxfp4"
    return root / "ceilings.json"


def device_key(kind: str) -> str:
    import torch

    if kind == "cuda":
        props = torch.cuda.get_device_properties(0)
        runtime = f"hip {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}"
        return f"{props.name} ({props.multi_processor_count} SMs, {props.total_memory >> 30} GiB, {runtime})"
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu {model} ({torch.get_num_threads()} threads)"


def _median_seconds_gpu(fn, reps: int) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


def _median_seconds_cpu(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(kind: str) -> Ceilings:
    """Copy bandwidth (2 * bytes / time of dst.copy_(src)) and bf16 matmul rate on this device."""
    bandwidth, rate = _measure_gpu() if kind == "cuda" else _measure_cpu()
    return Ceilings(bandwidth=bandwidth, matmul=rate, device=device_key(kind), source="measured")


def _measure_gpu() -> tuple[float, float]:
    import torch

    free, _ = torch.cuda.mem_get_info()
    nbytes = min(GPU_COPY_BYTES, free // 8)
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t_copy = _median_seconds_gpu(lambda: dst.copy_(src), 20)
    src = dst = None  # free before the matmul
    n = GPU_MATMUL_N
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t_mm = _median_seconds_gpu(lambda: a @ b, 20)
    a = b = None
    torch.cuda.empty_cache()
    return 2 * nbytes / t_copy, 2 * n**3 / t_mm


def _measure_cpu() -> tuple[float, float]:
    import torch

    nbytes = CPU_COPY_BYTES
    src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    t_copy = _median_seconds_cpu(lambda: dst.copy_(src), 5)
    src = dst = None
    # CPUs without bf16 matrix units run bf16 far slower than fp32: take the faster of the two.
    rate = 0.0
    for dtype in (torch.bfloat16, torch.float32):
        n = 256
        while True:  # grow until one matmul takes a measurable while
            a = torch.randn(n, n, dtype=dtype)
            b = torch.randn(n, n, dtype=dtype)
            t = _median_seconds_cpu(lambda a=a, b=b: a @ b, 3)
            if t > 0.05 or n >= 4096:
                break
            n *= 2
        rate = max(rate, 2 * n**3 / t)
    return 2 * nbytes / t_copy, rate


def load_or_measure(kind: str, remeasure: bool = False, path: Path | None = None) -> Ceilings:
    """The cached ceilings of this device, measured (and cached) when absent or when remeasure."""
    path = path or cache_path()
    key = device_key(kind)
    cache: dict = {}
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    entry = cache.get(key)
    if entry and not remeasure:
        return Ceilings(bandwidth=float(entry["bandwidth"]), matmul=float(entry["matmul"]), device=key, source="cache")
    ceil = measure(kind)
    cache[key] = {"bandwidth": ceil.bandwidth, "matmul": ceil.matmul, "measured_at": time.strftime("%Y-%m-%d %H:%M")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=2, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home still gets the numbers, just not cached
    return ceil


def parse_ceilings(text: str) -> Ceilings:
    """'TB/s,TFLOP/s' given by hand, e.g. '4.24,715' (the H200 of SPEC 6) or '8,2500' (MI355X, MXFP4)."""
    try:
        bw, rate = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--ceilings expects 'TBPS,TFLOPS', e.g. 4.24,715; got {text!r}") from None
    if bw <= 0 or rate <= 0:
        raise ValueError("--ceilings values must be positive")
    return Ceilings(bandwidth=bw * 1e12, matmul=rate * 1e12, device="given", source="given")
