"""`python -m bench.h200.ncu_summary DIR --shapes NAME...`: what bounds each launch, from an Nsight
Compute report of the decode path's calls (`python -m bench.h200.gluon_check ncu`) exported as CSV.

DIR holds raw.csv (`ncu -i REPORT --csv --page raw`) and, optionally, source_stage1.csv and
source_stage2.csv (`--page source --print-source sass --kernel-name regex:moe_stage1`, one block per
launch of that kernel, in launch order); each may be gzipped (NAME.csv.gz). --shapes names the
profiled shapes in the order they ran (gluon_check's ncu.json lists them): each shape's launches
begin at its moe_prep_kernel.

Per launch (launch_row): the duration, the tensor pipe's use (the wgmma flops against the SM's 4096
bf16 flops a cycle, and its busy cycles), issue-slot use, the warps each scheduler holds and how many
of them can issue, achieved occupancy, DRAM (bytes read, their rate, % of peak), the memory pipes,
occupancy's limits, spills and the five largest stall reasons (cycles a warp waits per issued
instruction, 1.0 of it the issue itself). METRICS names what it reads, for a run that collects only
those (bench.h200.stream). Per stage-1 and stage-2 launch with source counters:
the sampled stalls grouped by opcode, the hot instructions. Writes markdown to --md or stdout.
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd

from bench.h200.sass import opcode

BF16_FLOPS_PER_CYCLE = 4096  # H100/H200 SM, dense bf16 wgmma (ncu's peak_sustained of the metric below)
FLOPS = "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum"
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALLS = (
    "barrier",
    "dispatch_stall",
    "drain",
    "gmma",
    "lg_throttle",
    "long_scoreboard",
    "math_pipe_throttle",
    "mio_throttle",
    "no_instruction",
    "not_selected",
    "selected",
    "short_scoreboard",
    "wait",
)


STALL_METRICS = tuple(STALL.format(s) for s in STALLS)
# What launch_row reads, for a run that collects only these (ncu --metrics; every name is a column of
# the H200's --set full report, Nsight Compute 2025.3.1); the device attributes come with any report.
METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg",
    "sm__cycles_elapsed.avg.per_second",
    "launch__grid_dim_x",
    "launch__grid_dim_y",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic",
    "launch__shared_mem_per_block_static",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    FLOPS,
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "smsp__warps_active.avg.per_cycle_active",
    "smsp__warps_eligible.avg.per_cycle_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "smsp__average_warp_latency_per_inst_issued.ratio",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_read.sum.per_second",
    "dram__bytes_read.sum.pct_of_peak_sustained_elapsed",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_local_op_st.sum",
    *STALL_METRICS,
)


# ncu prints each metric in the unit it finds readable (decimal prefixes); these bring them to us,
# MHz, kB (shared memory a block), MB and TB/s.
TO_REPORTED = {
    "ns": 1e-3,
    "us": 1.0,
    "ms": 1e3,
    "Ghz": 1e3,
    "Mhz": 1.0,
    "byte/block": 1e-3,
    "Kbyte/block": 1.0,
    "byte": 1e-6,
    "Kbyte": 1e-3,
    "Mbyte": 1.0,
    "Gbyte": 1e3,
    "byte/s": 1e-12,
    "Kbyte/s": 1e-9,
    "Mbyte/s": 1e-6,
    "Gbyte/s": 1e-3,
    "Tbyte/s": 1.0,
}


def read_raw(path: Path) -> pd.DataFrame:
    """ncu's raw page, one row per launch, with durations in us, clocks in MHz, shared memory in kB,
    DRAM bytes in MB and their rate in TB/s whatever units the units row under the header names.
    Lines before the header (ncu's own ==PROF== and ==WARNING== lines, where its CSV went to stdout
    with them) are skipped."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as handle:
        lines = handle.read().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ValueError(f'{path.name}: no ncu raw-page header (a line beginning "ID",)')
    frame = pd.read_csv(io.StringIO("".join(lines[start:])), low_memory=False, dtype=str)
    units, frame = frame.iloc[0], frame.iloc[1:].reset_index(drop=True)
    for name in frame.columns:
        numbers = pd.to_numeric(frame[name].str.replace(",", ""), errors="coerce")
        if numbers.notna().all():
            frame[name] = numbers * TO_REPORTED.get(units[name], 1.0)
    return frame


def label_launches(frame: pd.DataFrame, shapes: list[str]) -> list[str]:
    """Shape per launch: a new shape at each moe_prep_kernel, in the order given."""
    labels, shape = [], -1
    for name in frame["Kernel Name"]:
        shape += name == "moe_prep_kernel"
        if not 0 <= shape < len(shapes):
            raise ValueError(f"--shapes names {len(shapes)} shapes; the report holds more moe_prep_kernel launches")
        labels.append(shapes[shape])
    return labels


def launch_row(row: pd.Series) -> dict:
    """One launch's figures (METRICS): its kernel, grid and resources, time, pipes, warps, memory and
    the five largest stalls."""
    elapsed = row["sm__cycles_elapsed.avg"]
    sms = row["device__attribute_multiprocessor_count"]
    stalls = sorted(((row[STALL.format(s)], s) for s in STALLS), reverse=True)
    limits = ("shared_mem", "registers", "warps", "blocks")
    return {
        "kernel": row["Kernel Name"].removeprefix("moe_").removesuffix("_kernel"),
        "grid": f"{row['launch__grid_dim_x']:.0f}x{row['launch__grid_dim_y']:.0f}",
        "programs": int(row["launch__grid_size"]),
        "sms": int(sms),
        "warps": int(row["launch__block_size"]) // 32,
        "regs": int(row["launch__registers_per_thread"]),
        "smem_kb": row["launch__shared_mem_per_block_dynamic"] + row["launch__shared_mem_per_block_static"],
        "per_sm": int(min(row[f"launch__occupancy_limit_{limit}"] for limit in limits)),
        "us": row["gpu__time_duration.sum"],
        "mhz": row["sm__cycles_elapsed.avg.per_second"],
        "tensor": 100 * row[FLOPS] / (BF16_FLOPS_PER_CYCLE * sms * elapsed),
        "tensor_pipe": row["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"],
        "issue": row["smsp__issue_active.avg.pct_of_peak_sustained_active"],
        "warps_sched": row["smsp__warps_active.avg.per_cycle_active"],
        "eligible": row["smsp__warps_eligible.avg.per_cycle_active"],
        "occupancy": row["sm__warps_active.avg.pct_of_peak_sustained_active"],
        "cpi": row["smsp__average_warp_latency_per_inst_issued.ratio"],
        "dram": row["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"],
        "dram_read_mb": row["dram__bytes_read.sum"],
        "dram_read_tbs": row["dram__bytes_read.sum.per_second"],
        "dram_read_pct": row["dram__bytes_read.sum.pct_of_peak_sustained_elapsed"],
        "l1": row["l1tex__throughput.avg.pct_of_peak_sustained_active"],
        "l2_hit": row["lts__t_sector_hit_rate.pct"],
        "spills": row["l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum"]
        + row["l1tex__t_requests_pipe_lsu_mem_local_op_st.sum"],
        "stalls": ", ".join(f"{name.removesuffix('_stall')} {value:.2f}" for value, name in stalls[:5]),
    }


def launch_rows(frame: pd.DataFrame, shapes: list[str]) -> list[dict]:
    return [{"shape": shape, **launch_row(frame.iloc[i])} for i, shape in enumerate(label_launches(frame, shapes))]


def find(folder: Path, name: str) -> Path | None:
    """NAME.csv or NAME.csv.gz in folder."""
    for path in (folder / f"{name}.csv", folder / f"{name}.csv.gz"):
        if path.is_file():
            return path
    return None


def read_source(path: Path) -> list[list[dict]]:
    """The source page: a block of per-instruction rows for each launch of the kernel."""
    blocks, header = [], None
    with gzip.open(path, "rt", newline="") if path.suffix == ".gz" else path.open(newline="") as handle:
        for row in csv.reader(handle):
            if not row:
                continue
            if row[0] == "Kernel Name":
                blocks.append([])
            elif row[0] == "Address":
                header = row
            elif blocks and header:
                blocks[-1].append(dict(zip(header, row, strict=False)))
    return blocks


def source_table(block: list[dict], top: int = 10) -> list[str]:
    """Sampled warp states by opcode (share of all samples, its three largest reasons) and the hottest
    instructions."""
    samples = [int(r["Warp Stall Sampling (All Samples)"]) for r in block]
    total = sum(samples) or 1
    by_op: Counter = Counter()
    reasons: dict[str, Counter] = defaultdict(Counter)
    for r, n in zip(block, samples, strict=True):
        op = opcode(r["Source"])
        by_op[op] += n
        for key, value in r.items():
            if key.startswith("stall_") and "Not Issued" not in key and value not in ("", "-"):
                reasons[op][key.removeprefix("stall_")] += int(value)
    lines = [
        f"{total} samples, {len(block)} instructions",
        "",
        "| opcode | samples | largest reasons |",
        "|---|---|---|",
    ]
    for op, n in by_op.most_common(top):
        why = ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in reasons[op].most_common(3))
        lines.append(f"| {op} | {100 * n / total:.1f}% | {why} |")
    hot = sorted(zip(samples, block, strict=True), key=lambda pair: -pair[0])[:6]
    lines += ["", "hottest: " + "; ".join(f"`{r['Source'].strip()[:48]}` {100 * n / total:.1f}%" for n, r in hot)]
    return lines


def report(folder: Path, shapes: list[str]) -> str:
    frame = read_raw(find(folder, "raw"))
    rows = launch_rows(frame, shapes)
    name = frame["device__attribute_display_name"].iloc[0]
    out = [
        f"{name}, {len(rows)} launches; tensor = wgmma bf16 flops / "
        f"({BF16_FLOPS_PER_CYCLE} x SMs x elapsed cycles); stalls in cycles per issued instruction",
        "",
        "| shape | launch | grid | warps | regs | smem kB | /SM | us | MHz | tensor % | issue % | warps/sched | "
        "eligible | cycles/inst | DRAM % | L1 % | L2 hit % | spill req | largest stalls |",
        "|" + "---|" * 19,
    ]
    for r in rows:
        out.append(
            f"| {r['shape']} | {r['kernel']} | {r['grid']} | {r['warps']} | {r['regs']} | {r['smem_kb']:.1f} | "
            f"{r['per_sm']} | {r['us']:.1f} | {r['mhz']:.0f} | {r['tensor']:.1f} | {r['issue']:.1f} | "
            f"{r['warps_sched']:.2f} | {r['eligible']:.2f} | {r['cpi']:.2f} | {r['dram']:.1f} | {r['l1']:.1f} | "
            f"{r['l2_hit']:.1f} | {r['spills']:.0f} | {r['stalls']} |"
        )
    for stage in ("stage1", "stage2"):
        path = find(folder, f"source_{stage}")
        if path is None:
            continue
        launches = [r for r in rows if r["kernel"] == stage]
        blocks = read_source(path)
        if len(blocks) != len(launches):
            raise ValueError(f"folder: {path.name} holds {len(blocks)} launches, raw.csv {len(launches)}")
        for launch, block in zip(launches, blocks, strict=True):
            out += ["", f"### {launch['shape']} {stage}, grid {launch['grid']}: sampled warp states", ""]
            out += source_table(block)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    from bench.runner.preflight import doc_parser, shown

    parser = doc_parser("python -m bench.h200.ncu_summary", __doc__)
    parser.add_argument("folder", type=Path, help="the exported CSVs (raw.csv, source_stage1.csv, ...)")
    parser.add_argument("--shapes", nargs="+", required=True, help="the profiled shapes, in launch order")
    parser.add_argument("--md", type=Path, help="write the markdown here (default: stdout)")
    args = parser.parse_args(argv)
    if find(args.folder, "raw") is None:
        return parser.fail(f"folder: no raw.csv or raw.csv.gz in {shown(args.folder)}")
    try:
        text = report(args.folder, args.shapes)
    except ValueError as error:
        return parser.fail(str(error))
    if args.md:
        args.md.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
