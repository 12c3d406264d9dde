"""TEST DOUBLE -- this is NOT aiter. A plain-torch stand-in for the part of ROCm aiter at
f3be04a12a0cfd6b5e2c7a94edc774f1bc24460d that moe_aiter/backend.py and moe_aiter/inject.py touch,
for machines without ROCm (where `import aiter` fails). Nothing here was copied from aiter: each
function states the aiter file it stands in for and reimplements the documented behaviour (and,
for kernels, the tiling behaviour read from their sources) with the math of SPEC 1 in torch.

`install(monkeypatch, tmp_path)` puts fresh module objects into sys.modules (undone when the test
ends) and returns an `AiterDouble` holding them, a log of the kernel-level calls (`calls`, a list
of (name, dict of arguments)) and switches (`flydsl_available`).

What is emulated, not just computed:
* moe_sorting_fwd: the SPEC 5 layout; entries past num_valid_ids[0] are filled with a
  valid-looking id (slot 1, token 0) and past the blocks with expert 0, so reading them shows.
* CK stage 1/2 (csrc/ck_gemm_moe_2stages_codegen): a known kernel name fixes MPerBlock,
  otherwise the heuristic maps block_m to it; ceil(sorted_size / MPerBlock) row blocks, block b
  uses sorted_expert_ids[b], whole blocks are skipped at b*MPerBlock >= num_valid_ids[0].
  Weights are un-shuffled only when the tensor carries is_shuffled (aiter/ops/moe_op.py:561, :601).
* FlyDSL stage 2 (mixed_moe_gemm_2stage.py): sorted_expert_ids.numel() blocks of tile_m rows,
  block b uses sorted_expert_ids[b]; out is zeroed first in atomic mode (moe_kernels.py:535).
* Activation scales are read by sorted position from the e8m0_shuffle tiling.
So a block_m / MPerBlock / tile_m mismatch, a lost is_shuffled or a wrong scale layout gives
wrong numbers here, as it would on the MI355X.
"""

import csv
import dataclasses
import enum
import functools
import os
import sys
import types

import torch
import torch.nn.functional as F

from mxfp4.codec import as_uint8, dequantize, quantize_activation

FP4 = torch.float4_e2m1fn_x2
E8M0 = torch.float8_e8m0fnu
GARBAGE_ID = (1 << 24) | 0  # what the double leaves in sorted_ids past num_valid_ids[0]

# Columns of aiter's tuned-fmoe CSV (aiter/configs/tuned_fmoe.csv line 1, plus `_tag`).
DOUBLE_CSV_COLUMNS = (
    "cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
    "doweight_stage1,block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage,tflops,bw,_tag"
).split(",")
_INDEX_COLS = DOUBLE_CSV_COLUMNS[:13]


# --------------------------------------------------------------------------------------------
# aiter/ops/enum.py + csrc/include/aiter_enum.h (pybind11 enums: str() is "Class.Member")
# --------------------------------------------------------------------------------------------
class ActivationType(enum.Enum):
    No = -1
    Silu = 0
    Gelu = 1
    Swiglu = 2

    def __str__(self):
        return f"ActivationType.{self.name}"


class QuantType(enum.Enum):
    No = 0
    per_Tensor = 1
    per_Token = 2
    per_1x32 = 3
    per_1x128 = 4
    per_128x128 = 5

    def __str__(self):
        return f"QuantType.{self.name}"


class DTYPES:
    """aiter/utility/dtypes.py: aiter's names of the torch dtypes."""

    fp4x2 = FP4
    fp8_e8m0 = E8M0
    fp8 = torch.float8_e4m3fn
    fp16 = torch.float16
    bf16 = torch.bfloat16
    fp32 = torch.float32
    i32 = torch.int32
    i8 = torch.int8
    u32 = torch.uint32


# csrc/ck_gemm_moe_2stages_codegen/gemm_moe_ck2stages_common.py:202-208, :324-332: the a4w4
# preshuffled instances, (BLOCK_SIZE, MPerBlock, NPerBlock, KPerBlock, MWaves, NWaves, version).
_CK_GEMM1 = ((256, 32, 128, 128, 1, 4, 3), (256, 64, 128, 128, 1, 4, 3), (256, 128, 128, 128, 1, 4, 3))
_CK_GEMM1 += ((64, 32, 32, 128, 1, 1, 3),)
_CK_GEMM2 = ((256, 32, 128, 128, 1, 4, 3), (256, 64, 128, 128, 1, 4, 3), (256, 128, 128, 128, 1, 4, 3))
_CK_GEMM2 += ((64, 32, 32, 128, 1, 1, 1), (64, 64, 128, 128, 1, 1, 3), (64, 128, 128, 128, 1, 1, 3))


def _dbl_ck_names(stage: int) -> dict:
    """name -> MPerBlock for the a4w4 silu/bf16 instances (kernelInstanceGEMM1/2.name)."""
    names = {}
    for block, m, n, k, mw, nw, ver in _CK_GEMM1 if stage == 1 else _CK_GEMM2:
        if stage == 1:
            tail = f"MulABScaleShuffled_v{ver}_Nswizzle0_Quant3_MulRoutedWeight0_silu_FP4X2_FP4X2_B16"
        else:
            tail = f"MulABScaleExpertWeightShuffled_v{ver}_Nswizzle0_Quant3_MulRoutedWeight1_FP4X2_FP4X2_B16"
        names[f"moe_ck2stages_gemm{stage}_{block}x{m}x{n}x{k}_{mw}x{nw}_{tail}"] = m
    return names


class DoubleKernelError(RuntimeError):
    """Where the real kernel would raise (TORCH_CHECK) or read out of bounds."""


def _dbl_fault(dbl, kernel_name: str, out: torch.Tensor) -> None:
    """The misbehaviour dbl.faults asks of this kernel, if any (tests of the tuner)."""
    fault = dbl.faults.get(kernel_name)
    if fault == "wrong":
        out.mul_(2.0)
    elif fault == "crash":
        os._exit(134)


@dataclasses.dataclass
class AiterDouble:
    modules: dict
    calls: list
    csv_path: str
    flydsl_available: bool = True
    cu_num: int = 256
    # kernel name -> "wrong" (its output doubled) or "crash" (the process exits, as on a GPU fault)
    faults: dict = dataclasses.field(default_factory=dict)
    # a folder laid out as aiter's AITER_ROOT_DIR: then AITER_CONFIG_FMOE_FILE merges its config
    # files as aiter/jit/core.py does (with $AITER_CONFIG_FMOE when set); None: csv_path alone
    aiter_root: str | None = None

    @property
    def aiter(self):
        return self.modules["aiter"]

    @property
    def fused_moe(self):
        return self.modules["aiter.fused_moe"]

    @property
    def moe_kernels(self):
        return self.modules["aiter.ops.flydsl.moe_kernels"]

    def names(self) -> list:
        return [name for name, _ in self.calls]

    def last(self, name: str) -> dict:
        for n, args in reversed(self.calls):
            if n == name:
                return args
        raise KeyError(name)


# --------------------------------------------------------------------------------------------
# math helpers (SPEC 1, 3)
# --------------------------------------------------------------------------------------------
def _dbl_params(fn, loc: dict) -> dict:
    """The call's arguments by parameter name (locals() of a closure also holds its free variables)."""
    code = getattr(fn, "__wrapped__", fn).__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return {k: loc[k] for k in names if k in loc}


def _dbl_u8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


def unshuffle_weight(w: torch.Tensor) -> torch.Tensor:
    """Inverse of mxfp4.codec.shuffle_weight: what aiter's preshuffled kernels read, row-major."""
    u = as_uint8(w, "w")
    if u.dim() < 2 or u.shape[-2] % 16 or u.shape[-1] % 32:
        raise ValueError(f"w: needs [..., N, Kb] with N % 16 == 0 and Kb % 32 == 0, got {tuple(u.shape)}")
    tiled = u.reshape(-1, u.shape[-2] // 16, u.shape[-1] // 32, 2, 16, 16)
    return tiled.permute(0, 1, 4, 2, 3, 5).contiguous().view(w.shape).view(w.dtype)


def unshuffle_scales(s: torch.Tensor, rows: int | None = None, cols: int | None = None) -> torch.Tensor:
    """Inverse of mxfp4.codec.shuffle_scales, trimmed to [rows, cols] (default: the whole padded tensor)."""
    u = as_uint8(s, "s")
    if u.dim() != 2 or u.shape[0] % 32 or u.shape[1] % 8:
        raise ValueError(f"s: expected a shuffled 2-D scale [32a, 8b], got shape {tuple(u.shape)}")
    pm, pn = u.shape
    out = u.view(pm // 32, pn // 8, 4, 16, 2, 2).permute(0, 5, 3, 1, 4, 2).reshape(pm, pn)
    return out[: pm if rows is None else rows, : pn if cols is None else cols].contiguous().view(s.dtype)


def _dbl_weights(w: torch.Tensor, w_scale: torch.Tensor, shuffled: bool) -> torch.Tensor:
    """fp32 [E, N, K] from fp4 [E, N, K/2] and the 2-D e8m0 scale of [E*N, K/32]. A kernel that
    assumes the preshuffled layout reads shuffled tensors right; one that does not (shuffled=False)
    reads them as raw row-major, which is wrong for shuffled data (aiter issue 2194)."""
    n_exp, n, kb = w.shape
    raw = unshuffle_weight(w) if shuffled else _dbl_u8(w)
    scales = unshuffle_scales(w_scale, n_exp * n, kb * 2 // 32) if shuffled else w_scale
    return dequantize(_dbl_u8(raw).reshape(n_exp * n, kb), _dbl_u8(scales)).reshape(n_exp, n, kb * 2)


def sorted_scale_rows(scales_2d: torch.Tensor, n_cols: int) -> torch.Tensor:
    """Undo the e8m0_shuffle tiling of a sorted-order activation scale view [-1, c8] -> uint8 [rows, n_cols]."""
    u = _dbl_u8(scales_2d).reshape(-1)
    c8 = scales_2d.shape[-1]
    rows = u.numel() // c8
    tiles = u.view(rows // 32, c8 // 8, 4, 16, 2, 2)  # (r0, c0, e, b, d, a)
    return tiles.permute(0, 5, 3, 1, 4, 2).reshape(rows, c8)[:, :n_cols]


def shuffle_sorted_scales(rows_u8: torch.Tensor) -> torch.Tensor:
    """uint8 [32a, 8b] -> aiter's (a, b, 4, 16, 4) e8m0_shuffle tiling."""
    r, c = rows_u8.shape
    return rows_u8.view(r // 32, 2, 16, c // 8, 2, 4).permute(0, 3, 5, 2, 4, 1).reshape(r // 32, c // 8, 4, 16, 4)


def _dbl_rows_of_block(ids: torch.Tensor, tokens: int):
    """(token, slot, real) of sorted ids slot << 24 | token; padding ids carry token >= tokens."""
    token = ids & 0xFFFFFF
    slot = (ids >> 24) & 0xFF
    ok = token < tokens
    return token, slot, ok


def _dbl_act_rows(x_fp4: torch.Tensor, rows: torch.Tensor, scale_rows: torch.Tensor) -> torch.Tensor:
    """Dequantize fp4 rows x_fp4[rows] with per-row scales (uint8 [n, K/32])."""
    return dequantize(_dbl_u8(x_fp4)[rows], scale_rows)


def sort_routing(
    topk_ids, topk_weights, sorted_token_ids, sorted_weights, sorted_expert_ids, num_valid_ids, num_experts, unit
):
    """moe_sorting_fwd's layout (SPEC 5) into the given buffers: ids slot << 24 | token grouped by
    expert ascending (then token), each expert padded to `unit` with topk << 24 | M (weight 0),
    one expert id per block, num_valid_ids = [padded total, M]. Past the total: GARBAGE_ID, weight
    1e3, expert 0 -- values a correct consumer never reads."""
    m, k = topk_ids.shape
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)  # by expert, then token, then slot
    e_sorted = flat[order]
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + unit - 1) // unit * unit
    start_pad = torch.cumsum(padded, 0) - padded
    start_raw = torch.cumsum(counts, 0) - counts
    pos = start_pad[e_sorted] + torch.arange(flat.numel(), device=flat.device) - start_raw[e_sorted]
    total = int(padded.sum())
    n_blocks = total // unit
    if total > sorted_token_ids.numel() or n_blocks > sorted_expert_ids.numel():
        raise DoubleKernelError("moe_sorting_fwd: output buffers too small")
    sorted_token_ids.fill_(GARBAGE_ID)
    sorted_token_ids[:total] = (k << 24) | m
    sorted_token_ids[pos] = (((order % k) << 24) | (order // k)).to(torch.int32)
    sorted_weights.fill_(1e3)
    sorted_weights[:total] = 0
    sorted_weights[pos] = topk_weights.reshape(-1)[order].to(torch.float32)
    sorted_expert_ids.zero_()
    sorted_expert_ids[:n_blocks] = torch.repeat_interleave(
        torch.arange(num_experts, device=flat.device), padded // unit
    ).to(torch.int32)
    num_valid_ids[0] = total
    if num_valid_ids.numel() > 1:
        num_valid_ids[1] = m


def sorted_buffers(topk_ids, topk_weights, num_experts, unit):
    """Allocate moe_sorting's buffers (aiter/fused_moe.py:50-59 sizes) and fill them with sort_routing."""
    m, k = topk_ids.shape
    max_padded = m * k + num_experts * unit - k
    dev = topk_ids.device
    ids = torch.empty(max_padded, dtype=torch.int32, device=dev)
    weights = torch.empty(max_padded, dtype=torch.float32, device=dev)
    experts = torch.empty(-(-max_padded // unit), dtype=torch.int32, device=dev)
    num_valid = torch.empty(2, dtype=torch.int32, device=dev)
    sort_routing(topk_ids, topk_weights, ids, weights, experts, num_valid, num_experts, unit)
    return ids, weights, experts, num_valid


# --------------------------------------------------------------------------------------------
# install
# --------------------------------------------------------------------------------------------
def write_tuned_csv(path, rows: list) -> str:
    """A tuned-fmoe CSV in aiter's column order; rows are dicts (missing columns left empty)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=DOUBLE_CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in DOUBLE_CSV_COLUMNS})
    return str(path)


# The fields that every official shape's 2-stage config row shares (cu_num 256 for the MI355X).
OFFICIAL_ROW_FIELDS = dict(
    cu_num=256,
    model_dim=7168,
    topk=9,
    act_type="ActivationType.Silu",
    dtype="torch.bfloat16",
    q_dtype_a="torch.float4_e2m1fn_x2",
    q_dtype_w="torch.float4_e2m1fn_x2",
    q_type="QuantType.per_1x32",
    use_g1u1=1,
    doweight_stage1=0,
    ksplit=0,
    run_1stage=0,
)


def packaged_rows() -> list:
    """Stand-ins for aiter's packaged table: a dsv3-style row for an official key (which the
    overrides must replace), an unrelated row (which must survive) and a flydsl_fallback row
    (which aiter drops on load)."""
    common = dict(OFFICIAL_ROW_FIELDS, inter_dim=256, expert=257, us=1.0)
    k1 = next(n for n in _dbl_ck_names(1) if "_64x32x32x128_" in n)
    k2 = next(n for n in _dbl_ck_names(2) if "_64x32x32x128_" in n)
    return [
        dict(common, token=128, block_m=32, kernelName1=k1, kernelName2=k2),
        dict(common, token=1, block_m=32, kernelName1=k1, kernelName2=k2),
        dict(common, token=16384, block_m=128, kernelName1=k1, kernelName2=k2, _tag="flydsl_fallback"),
    ]


def reset_backend() -> None:
    """moe_aiter.backend forgets the aiter it imported, the table it injected and every plan, so
    that its next call takes the double installed now."""
    from moe_aiter import backend

    backend._STATE.update(aiter=None, fm=None, table=None, plans={})


def install(monkeypatch, tmp_path, flydsl_available: bool = True, cu_num: int = 256, csv_rows=None) -> AiterDouble:
    """Install the double as `aiter` (and the submodules used) into sys.modules for one test."""
    csv_path = write_tuned_csv(tmp_path / "tuned_fmoe_double.csv", packaged_rows() if csv_rows is None else csv_rows)
    dbl = AiterDouble(modules={}, calls=[], csv_path=csv_path, flydsl_available=flydsl_available, cu_num=cu_num)
    names = (
        "aiter",
        "aiter.fused_moe",
        "aiter.jit",
        "aiter.jit.core",
        "aiter.jit.utils",
        "aiter.jit.utils.chip_info",
        "aiter.utility",
        "aiter.utility.dtypes",
        "aiter.ops",
        "aiter.ops.flydsl",
        "aiter.ops.flydsl.moe_kernels",
        "aiter.ops.flydsl.utils",
        "aiter.ops.triton",
        "aiter.ops.triton.quant",
        "aiter.ops.triton.quant.fused_mxfp4_quant",
    )
    for name in names:
        mod = types.ModuleType(name)
        mod.__file__ = f"<aiter test double: {name}>"
        mod.__path__ = []  # a package, so `import aiter.x.y` resolves through sys.modules
        dbl.modules[name] = mod
    _build_chip_info(dbl)
    _build_jit_core(dbl)
    _build_flydsl(dbl)
    _build_quant(dbl)
    _build_aiter_ops(dbl)
    _build_fused_moe(dbl)
    # attribute links parent -> child, as an import of the real package leaves them
    for name, mod in dbl.modules.items():
        if "." in name:
            parent, child = name.rsplit(".", 1)
            setattr(dbl.modules[parent], child, mod)
    dbl.aiter.dtypes = dbl.modules["aiter.utility.dtypes"]
    dbl.aiter.core = dbl.modules["aiter.jit.core"]
    for name, mod in dbl.modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return dbl


def install_in_process(faults: dict | None = None) -> AiterDouble:
    """Install the double for the rest of this process (a spawned worker of the tuner's tests);
    `faults` as AiterDouble.faults."""
    import tempfile
    from pathlib import Path

    import pytest

    dbl = install(pytest.MonkeyPatch(), Path(tempfile.mkdtemp(prefix="aiter_double_")))
    dbl.faults.update(faults or {})
    return dbl


def _build_chip_info(dbl):
    """aiter/jit/utils/chip_info.py: get_cu_num (lru_cached, from rocminfo) and get_gfx."""
    mod = dbl.modules["aiter.jit.utils.chip_info"]
    mod.get_cu_num = functools.lru_cache(maxsize=1)(lambda: dbl.cu_num)
    mod.get_gfx = lambda: "gfx950"
    dt = dbl.modules["aiter.utility.dtypes"]
    for k, v in vars(DTYPES).items():
        if not k.startswith("_"):
            setattr(dt, k, v)


def _build_jit_core(dbl):
    """aiter/jit/core.py:115-150, :278: AITER_CONFIGS.AITER_CONFIG_FMOE_FILE."""

    class _Configs:
        @property
        def AITER_CONFIG_FMOE_FILE(self):
            if dbl.aiter_root is None:
                return dbl.csv_path
            return merged_config_file(dbl.aiter_root, os.environ.get("AITER_CONFIG_FMOE"), dbl.csv_path)

    dbl.modules["aiter.jit.core"].AITER_CONFIGS = _Configs()


def merged_config_file(aiter_root, env_value: str | None, out_path: str, name: str = "tuned_fmoe") -> str:
    """aiter/jit/core.py:250-275 get_config_file + :182-247 update_config_files for the fmoe table.

    Unset: aiter/configs/tuned_fmoe.csv and every model_configs file matching *tuned_fmoe* whose
    path holds no "untuned"; set: the listed files only. One file is used as is; several are
    concatenated (columns must agree but for `_tag`), sorted by `us` and deduplicated on the
    columns of untuned_fmoe.csv plus cu_num and `_tag`, keeping the fastest; written to out_path."""
    from pathlib import Path

    import pandas as pd

    configs = Path(aiter_root) / "aiter" / "configs"
    if env_value:
        paths = env_value.split(os.pathsep)
    else:
        model = [p for p in (configs / "model_configs").glob(f"*{name}*") if p.is_file() and "untuned" not in str(p)]
        paths = [str(configs / f"{name}.csv"), *map(str, model)]
    if len(paths) <= 1:
        return paths[0]
    frames = [pd.read_csv(paths[0])] + [pd.read_csv(p) for p in paths[1:] if os.path.exists(p)]
    base = [c for c in frames[0].columns if c != "_tag"]
    for f in frames[1:]:
        if [c for c in f.columns if c != "_tag"] != base:
            raise AssertionError("Column mismatch between config files")
    merged = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    keys = list(pd.read_csv(configs / "untuned_fmoe.csv").columns) + ["cu_num"]
    if "_tag" in merged.columns:
        merged["_tag"] = merged["_tag"].astype(object).fillna("")  # an all-empty column reads as float
        keys.append("_tag")
    merged = merged.sort_values("us").drop_duplicates(subset=keys, keep="first").reset_index(drop=True)
    merged.to_csv(out_path, index=False)
    return out_path


def _flydsl_registry() -> dict:
    """moe_kernels.py:95-102 registers a in {fp8, fp4, fp16}, b fp4, out {bf16, f16}; stage 1 tile_m
    {16, 32, 64} x tile_n 256 x tile_k 256 (fp4), stage 2 tile_m {32, 64} x tile_n {128, 256} x
    tile_k 256 x {atomic, reduce} (:38-92)."""
    registry = {}
    for a, out in ((a, out) for a in ("fp8", "fp4", "fp16") for out in ("bf16", "f16")):
        common = dict(a_dtype=a, b_dtype="fp4", out_dtype=out, tile_k=256)
        for tm in (16, 32, 64):
            registry[f"flydsl_moe1_a{a}_wfp4_{out}_t{tm}x256x256"] = dict(common, stage=1, tile_m=tm, tile_n=256)
        for tm, tn, mode in ((tm, tn, mode) for tm in (32, 64) for tn in (128, 256) for mode in ("atomic", "reduce")):
            name = f"flydsl_moe2_a{a}_wfp4_{out}_t{tm}x{tn}x256_{mode}"
            registry[name] = dict(common, stage=2, tile_m=tm, tile_n=tn, mode=mode)
    for params in registry.values():
        params["MPerBlock"] = params["tile_m"]
    return registry


def _build_flydsl(dbl):
    """aiter/ops/flydsl/utils.py, moe_kernels.py (_KERNEL_PARAMS registry, flydsl_moe_stage2)."""
    utils = dbl.modules["aiter.ops.flydsl.utils"]
    utils.is_flydsl_available = lambda: dbl.flydsl_available
    mk = dbl.modules["aiter.ops.flydsl.moe_kernels"]
    registry = _flydsl_registry()
    mk._KERNEL_PARAMS = registry
    mk.get_flydsl_kernel_params = lambda name: registry.get(name)
    mk.flydsl_moe_stage2 = _flydsl_moe_stage2(dbl)
    fly = dbl.modules["aiter.ops.flydsl"]
    fly.is_flydsl_available = utils.is_flydsl_available
    fly.flydsl_moe_stage2 = mk.flydsl_moe_stage2


def _flydsl_moe_stage2(dbl):
    def flydsl_moe_stage2(
        inter_states,
        w2,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        out=None,
        topk=1,
        *,
        tile_m=32,
        tile_n=128,
        tile_k=256,
        a_dtype="fp8",
        b_dtype="fp4",
        out_dtype="bf16",
        mode="atomic",
        w2_scale=None,
        a2_scale=None,
        sorted_weights=None,
    ):
        """moe_kernels.py:496 flydsl_moe_stage2 + mixed_moe_gemm_2stage.py compile_mixed_moe_gemm2."""
        dbl.calls.append(("flydsl_moe_stage2", _dbl_params(flydsl_moe_stage2, locals())))
        if not dbl.flydsl_available:
            raise ModuleNotFoundError("flydsl (double: FlyDSL switched off)")
        if (a_dtype, b_dtype, out_dtype) != ("fp4", "fp4", "bf16"):
            raise DoubleKernelError(f"double covers fp4 x fp4 -> bf16 only, got {a_dtype}, {b_dtype}, {out_dtype}")
        token_num = inter_states.shape[0]
        if out is None:
            out = torch.zeros((token_num, w2.shape[1]), dtype=torch.bfloat16, device=inter_states.device)
        elif mode != "reduce":  # atomic: accumulates into a zeroed output
            out.zero_()
        n_blocks = int(sorted_expert_ids.numel())  # grid y (mixed_moe_gemm_2stage.py:2797)
        # the sorted-ids buffer descriptor covers n_blocks * tile_m ids (:1831-1841); beyond it reads 0
        blocks = _Blocks(
            _zero_padded(sorted_token_ids, n_blocks * tile_m),
            sorted_expert_ids,
            int(num_valid_ids[0]),
            tile_m,
            n_blocks,
            None if sorted_weights is None else _zero_padded(sorted_weights, n_blocks * tile_m),
        )
        x2d = inter_states.reshape(token_num * topk, -1)
        # FlyDSL always reads the preshuffled layout
        _dbl_stage2_math(x2d, w2, w2_scale, a2_scale, blocks, out, topk, fp4_act=True, shuffled=True)
        return out

    return flydsl_moe_stage2


def _zero_padded(t: torch.Tensor, n: int) -> torch.Tensor:
    """The first n entries of t, zeros past its end (what a buffer descriptor of n entries reads)."""
    padded = torch.zeros(n, dtype=t.dtype, device=t.device)
    k = min(n, t.numel())
    padded[:k] = t[:k]
    return padded


@dataclasses.dataclass
class _Blocks:
    """The sorted routing as a stage kernel walks it: ids and (optional) weights by sorted position,
    one expert per block of m_per_block rows, n_blocks blocks launched, n_valid rows real."""

    ids: torch.Tensor
    expert_ids: torch.Tensor
    n_valid: int
    m_per_block: int
    n_blocks: int
    weights: torch.Tensor | None = None

    def rows(self, b: int, tokens: int, limit: int | None = None):
        """(sorted positions, token, slot) of block b's real rows, or None when the kernel skips it:
        at or past n_valid, or with an expert id out of n_experts."""
        if b * self.m_per_block >= self.n_valid:
            return None
        if b >= self.expert_ids.numel():
            raise DoubleKernelError(f"a stage reads sorted_expert_ids[{b}] past its {self.expert_ids.numel()} entries")
        end = (b + 1) * self.m_per_block
        r = torch.arange(b * self.m_per_block, end if limit is None else min(end, limit), device=self.ids.device)
        r = r[r < self.ids.numel()]
        token, slot, ok = _dbl_rows_of_block(self.ids[r], tokens)
        return r[ok], token[ok].long(), slot[ok].long()


def _dbl_stage2_math(x2d, w2, w2_scale, a2_scale, blocks: _Blocks, out, topk, fp4_act, shuffled):
    """out[token] += w * (a2[token*topk+slot] @ W2[e].T) over the row blocks a stage-2 kernel covers."""
    n_exp, model_dim, _ = w2.shape
    tokens = x2d.shape[0] // topk
    w2f = _dbl_weights(w2, w2_scale, shuffled)
    scale_rows = sorted_scale_rows(a2_scale, w2f.shape[2] // 32) if fp4_act else None
    acc = torch.zeros((tokens, model_dim), dtype=torch.float32, device=out.device)
    for b in range(blocks.n_blocks):
        found = blocks.rows(b, tokens)
        if found is None or not 0 <= int(blocks.expert_ids[b]) < n_exp or found[0].numel() == 0:
            continue
        r, token, slot = found
        src = token * topk + slot
        a = _dbl_act_rows(x2d, src, scale_rows[r]) if fp4_act else x2d[src].float()
        y = a @ w2f[int(blocks.expert_ids[b])].T
        if blocks.weights is not None:
            y = y * blocks.weights[r, None]
        acc.index_add_(0, token, y)
    out += acc.to(out.dtype)


def _build_quant(dbl):
    """aiter/ops/triton/quant/fused_mxfp4_quant.py:561 fused_dynamic_mxfp4_quant_moe_sort (SPEC 3.3 math)."""

    def fused_dynamic_mxfp4_quant_moe_sort(
        x, sorted_ids, num_valid_ids, token_num, topk, block_size=32, scaling_mode="even"
    ):
        dbl.calls.append(
            ("aiter.fused_dynamic_mxfp4_quant_moe_sort", _dbl_params(fused_dynamic_mxfp4_quant_moe_sort, locals()))
        )
        if block_size % 32:
            raise AssertionError("block_size % BLOCK_SIZE_M == 0")  # fused_mxfp4_quant.py:609
        m, n = x.shape
        packed, scales = quantize_activation(x)
        n_sorted = sorted_ids.numel()
        rows = -(-n_sorted // 32) * 32
        cols = -(-(n // 32) // 8) * 8
        # Unwritten blocks hold random bytes, the same on every call of one size (as a buffer the
        # allocator hands back holds what it held): a row that reads them then computes the same
        # garbage in the submission and in the leaderboard's rerun, on every device.
        gen = torch.Generator(device=x.device)
        gen.manual_seed(rows * cols)
        mat = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, device=x.device, generator=gen)
        n_valid = int(num_valid_ids[0])
        valid_rows = -(-n_valid // 32) * 32
        mat[:valid_rows] = 0
        ids = sorted_ids[:n_valid]
        token, slot = ids & 0xFFFFFF, (ids >> 24) & 0xFF
        ok = token < token_num
        src = token if topk == 1 else token * topk + slot
        pos = torch.nonzero(ok).squeeze(1)
        mat[pos, : n // 32] = scales[src[ok].long()]
        tiled = shuffle_sorted_scales(mat)
        return packed.view(FP4), tiled.view(E8M0).view(-1, n // 32)

    dbl.modules[
        "aiter.ops.triton.quant.fused_mxfp4_quant"
    ].fused_dynamic_mxfp4_quant_moe_sort = fused_dynamic_mxfp4_quant_moe_sort


def _build_aiter_ops(dbl):
    """The `aiter` namespace: enums (aiter/ops/enum.py), dtypes, logger, moe_sorting_fwd
    (aiter/ops/moe_sorting.py:12), ck_moe_stage1_fwd / ck_moe_stage2_fwd (aiter/ops/moe_op.py:522, :566),
    moe_cktile2stages_gemm1/2 (aiter/ops/moe_op.py:358, :417), silu_and_mul (aiter/ops/activation.py)."""
    ai = dbl.modules["aiter"]
    ai.ActivationType = ActivationType
    ai.QuantType = QuantType
    ai.logger = types.SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None, error=print)
    ai.moe_sorting_fwd = _moe_sorting_fwd(dbl)
    ai.ck_moe_stage1_fwd = _ck_moe_stage1_fwd(dbl)
    ai.ck_moe_stage2_fwd = _ck_moe_stage2_fwd(dbl)
    ai.moe_cktile2stages_gemm1 = _moe_cktile2stages_gemm(dbl, 1)
    ai.moe_cktile2stages_gemm2 = _moe_cktile2stages_gemm(dbl, 2)
    ai.silu_and_mul = silu_and_mul


def silu_and_mul(out, x):
    """aiter/ops/activation.py: out = silu(gate) * up over x = gate | up."""
    out.copy_(_silu_mul(x.float()).to(out.dtype))


def _silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    inter = gate_up.shape[-1] // 2
    return F.silu(gate_up[..., :inter]) * gate_up[..., inter:]


def _moe_sorting_fwd(dbl):
    def moe_sorting_fwd(
        topk_ids,
        topk_weights,
        sorted_token_ids,
        sorted_weights,
        sorted_expert_ids,
        num_valid_ids,
        moe_buf,
        num_experts,
        unit_size,
        local_expert_mask=None,
        num_local_tokens=None,
        dispatch_policy=0,
    ):
        dbl.calls.append(("moe_sorting_fwd", _dbl_params(moe_sorting_fwd, locals())))
        if local_expert_mask is not None or num_local_tokens is not None:
            raise NotImplementedError("double: expert masks / local token counts")
        buffers = (sorted_token_ids, sorted_weights, sorted_expert_ids, num_valid_ids)
        sort_routing(topk_ids, topk_weights, *buffers, num_experts, unit_size)
        moe_buf.zero_()

    return moe_sorting_fwd


def _mper_block(stage: int, kernel_name: str, block_m: int) -> int:
    """The MPerBlock a CK stage kernel runs with."""
    known = _dbl_ck_names(stage)
    if kernel_name in known:
        return known[kernel_name]  # gemm_moe_ck2stages.cu:26-33: the named instance, block_m unused
    if block_m in (32, 64, 128):  # heuristic dispatch (gen_instances.py:276-293, :628-660)
        return block_m
    raise DoubleKernelError(f"Unsupported block_m value for moe heuristic dispatch: {block_m}")


def _ck_stage1_checks(hidden_states, w1, out, a1_scale, w1_scale, sorted_weights, quant_type, activation) -> None:
    """What the a4w4 silu CK stage 1 refuses (TORCH_CHECKs), and what the double does not cover."""
    if quant_type != QuantType.per_1x32 or activation != ActivationType.Silu:
        raise DoubleKernelError("double covers per_1x32 silu only")
    if hidden_states.dtype != FP4 or w1.dtype != FP4:
        raise DoubleKernelError(f"a4w4 stage 1 needs fp4x2 activations and weights, got {hidden_states.dtype}")
    if a1_scale is None or a1_scale.dtype != E8M0 or w1_scale.dtype != E8M0:
        raise DoubleKernelError("a4w4 stage 1 needs e8m0 scales")
    if out.dtype != torch.bfloat16:
        raise DoubleKernelError("Out dtype only support BFloat16/Float16!")
    if sorted_weights is not None:
        raise DoubleKernelError("double: MulRoutedWeight in stage 1 not covered")


def _ck_moe_stage1_fwd(dbl):
    def ck_moe_stage1_fwd(
        hidden_states,
        w1,
        w2,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        out,
        topk,
        kernelName="",
        w1_scale=None,
        a1_scale=None,
        block_m=32,
        sorted_weights=None,
        quant_type=QuantType.No,
        activation=ActivationType.Silu,
        splitk=1,
        use_non_temporal_load=False,
        dst_type=None,
    ):
        dbl.calls.append(("ck_moe_stage1_fwd", _dbl_params(ck_moe_stage1_fwd, locals())))
        _ck_stage1_checks(hidden_states, w1, out, a1_scale, w1_scale, sorted_weights, quant_type, activation)
        tokens = hidden_states.shape[0]
        mpb = _mper_block(1, kernelName, block_m)
        sorted_size = min(tokens * topk * block_m, sorted_token_ids.numel())  # gemm_moe_ck2stages.cu:83
        blocks = _Blocks(sorted_token_ids, sorted_expert_ids, int(num_valid_ids[0]), mpb, -(-sorted_size // mpb))
        w1f = _dbl_weights(w1, w1_scale, getattr(w1, "is_shuffled", False))
        scale_rows = sorted_scale_rows(a1_scale, w1f.shape[2] // 32)
        for b in range(blocks.n_blocks):
            found = blocks.rows(b, tokens, limit=sorted_size)
            if found is None or found[0].numel() == 0:
                continue
            r, token, slot = found
            a = _dbl_act_rows(hidden_states, token, scale_rows[r])
            out[token, slot] = _silu_mul(a @ w1f[int(sorted_expert_ids[b])].T).to(out.dtype)
        _dbl_fault(dbl, kernelName, out)
        return out

    return ck_moe_stage1_fwd


def _ck_moe_stage2_fwd(dbl):
    def ck_moe_stage2_fwd(
        inter_states,
        w1,
        w2,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        out,
        topk,
        kernelName="",
        w2_scale=None,
        a2_scale=None,
        block_m=32,
        sorted_weights=None,
        quant_type=QuantType.No,
        activation=ActivationType.Silu,
        use_non_temporal_load=False,
    ):
        dbl.calls.append(("ck_moe_stage2_fwd", _dbl_params(ck_moe_stage2_fwd, locals())))
        if inter_states.dtype != FP4 or a2_scale is None or a2_scale.dtype != E8M0:
            raise DoubleKernelError("a4w4 stage 2 needs fp4x2 activations with e8m0 scales")
        tokens = inter_states.shape[0]
        mpb = _mper_block(2, kernelName, block_m)
        sorted_size = min(tokens * topk * block_m, sorted_token_ids.numel())  # gemm_moe_ck2stages.cu:147
        n_valid = int(num_valid_ids[0])
        blocks = _Blocks(sorted_token_ids[:sorted_size], sorted_expert_ids, n_valid, mpb, -(-sorted_size // mpb))
        blocks.weights = sorted_weights
        x2d = inter_states.reshape(tokens * topk, -1)
        shuffled = getattr(w2, "is_shuffled", False)
        _dbl_stage2_math(x2d, w2, w2_scale, a2_scale, blocks, out, topk, fp4_act=True, shuffled=shuffled)
        _dbl_fault(dbl, kernelName, out)
        return out

    return ck_moe_stage2_fwd


def _moe_cktile2stages_gemm(dbl, stage: int):
    """moe_cktile2stages_gemm1 / gemm2: one signature in aiter, the stage's math behind it."""

    def moe_cktile2stages_gemm(
        XQ,
        WQ,
        Y,
        sorted_ids,
        sorted_expert_ids,
        max_token_ids,
        topk,
        n_padded_zeros=0,
        k_padded_zeros=0,
        topk_weight=None,
        x_scale=None,
        w_scale=None,
        exp_bias=None,
        activation=0,
        block_m=32,
        split_k=1,
    ):
        dbl.calls.append((f"moe_cktile2stages_gemm{stage}", _dbl_params(moe_cktile2stages_gemm, locals())))
        if XQ.dtype != torch.bfloat16 or x_scale is not None:
            raise DoubleKernelError(f"cktile stage {stage} (fp4 weights) takes bf16 activations without scales")
        n_valid = int(max_token_ids[0])
        blocks = _Blocks(sorted_ids, sorted_expert_ids, n_valid, block_m, -(-n_valid // block_m), topk_weight)
        if stage == 1:
            _cktile_stage1_math(XQ, WQ, w_scale, Y, blocks, split_k)
        else:
            x2d = XQ.reshape(XQ.shape[0] * topk, -1)
            _dbl_stage2_math(x2d, WQ, w_scale, None, blocks, Y, topk, fp4_act=False, shuffled=True)
        return Y

    moe_cktile2stages_gemm.__name__ = moe_cktile2stages_gemm.__qualname__ = f"moe_cktile2stages_gemm{stage}"
    return moe_cktile2stages_gemm


def _cktile_stage1_math(x, w1, w1_scale, y, blocks: _Blocks, split_k: int) -> None:
    """y[token, slot] = silu(gate) * up of x[token] @ W1[e].T, or the raw gate | up when split_k > 1
    (silu_and_mul follows)."""
    w1f = _dbl_weights(w1, w1_scale, True)
    for b in range(blocks.n_blocks):
        r, token, slot = blocks.rows(b, x.shape[0])
        if token.numel() == 0:
            continue
        gu = x[token].float() @ w1f[int(blocks.expert_ids[b])].T
        y[token, slot] = (gu if split_k > 1 else _silu_mul(gu)).to(y.dtype)


def _build_fused_moe(dbl):
    """aiter/fused_moe.py: module globals and the functions of the per_1x32 / Silu / bf16 path."""
    fm = dbl.modules["aiter.fused_moe"]
    chip = dbl.modules["aiter.jit.utils.chip_info"]
    fm.BLOCK_SIZE_M = 32
    fm.cfg_2stages = None  # :568
    fm.AITER_CONFIGS = dbl.modules["aiter.jit.core"].AITER_CONFIGS
    fm.get_cu_num = chip.get_cu_num
    fm.get_gfx = chip.get_gfx
    fm.is_flydsl_available = dbl.modules["aiter.ops.flydsl.utils"].is_flydsl_available
    fm.fused_dynamic_mxfp4_quant_moe_sort = dbl.modules[
        "aiter.ops.triton.quant.fused_mxfp4_quant"
    ].fused_dynamic_mxfp4_quant_moe_sort
    fm.nextPow2 = next_pow2
    for fn in (
        functools.lru_cache(maxsize=2048)(get_inter_dim),
        get_padded_M,
        MOEMetadata,
        *_sizing(fm),
        *_stage_wrappers(dbl),
        _get_2stage_cfgs(dbl),
        _moe_sorting(dbl),
        _fused_moe(dbl),
    ):
        setattr(fm, fn.__name__, fn)


def get_inter_dim(w1_shape, w2_shape):
    """aiter/fused_moe.py:119 -- (E, model_dim, inter_dim), inter_dim scaled for packed fp4
    (model_dim // w1.shape[-1])."""
    n_exp, _, model_dim = w1_shape
    n_exp, model_dim, inter_dim = w2_shape
    return n_exp, model_dim, inter_dim * (model_dim // w1_shape[-1])


def next_pow2(n):
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def get_padded_M(M):
    """aiter/fused_moe.py:607 -- next power of two below 1024, then 1024 / 2048 / 16384 buckets."""
    if M < 1024:
        return next_pow2(M)
    return 1024 if M < 2048 else 2048 if M < 16384 else 16384


@dataclasses.dataclass
class MOEMetadata:
    """aiter/fused_moe.py:624"""

    stage1: object
    stage2: object
    block_m: int
    ksplit: int
    run_1stage: bool = False
    has_bias: bool = False
    use_non_temporal_load: bool = True


def _sizing(fm) -> tuple:
    """get_block_size_M and get_ksplit, which read the CU count through fm.get_cu_num."""

    def get_block_size_M(token, topk, expert, inter_dim):
        """:517 -- the block_m of 32/64/128 with the fewest rounds over the CUs."""
        cu = fm.get_cu_num()
        tg_n = (inter_dim + 127) // 128
        best = []
        for el in (32, 64, 128):
            max_tokens = token * topk + expert * el - topk
            tg_num = tg_n * (max_tokens + el - 1) // el
            best.append(((tg_num + cu - 1) // cu, cu - tg_num % cu, el))
        return sorted(best, key=lambda t: t[:2])[0][-1]

    def get_ksplit(token, topk, expert, inter_dim, model_dim):
        """:542 -- split K only for decode shapes with fewer tiles than CUs."""
        if token * topk > expert:
            return 0
        cu = fm.get_cu_num()
        tg_num = ((inter_dim + 127) // 128) * token * topk
        if tg_num >= cu:
            return 0
        for i in reversed(range(2, (cu + tg_num - 1) // tg_num + 1)):
            if model_dim % i == 0 and (model_dim // i) % 256 == 0:
                return i
        return 0

    return get_block_size_M, get_ksplit


def _stage_wrappers(dbl) -> tuple:
    """fused_moe.py's wrappers around the stage kernels that MOEMetadata holds."""
    return _flydsl_stage2_wrapper(dbl), _ck_moe_stage1(dbl), _cktile_moe_stage1(dbl), _cktile_moe_stage2(dbl)


def _flydsl_stage2_wrapper(dbl):
    def _flydsl_stage2_wrapper(
        inter_states,
        w1,
        w2,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        out,
        topk,
        kernelName="",
        w2_scale=None,
        a2_scale=None,
        sorted_weights=None,
        **_kwargs,
    ):
        """aiter/fused_moe.py:634 -- tile params from the registry by name; block_m is swallowed by **_kwargs."""
        parsed = dbl.modules["aiter.ops.flydsl.moe_kernels"].get_flydsl_kernel_params(kernelName)
        if parsed is None:
            raise ValueError(f"Invalid FlyDSL kernel name: {kernelName}")
        tiles = {k: parsed[k] for k in ("tile_m", "tile_n", "tile_k", "a_dtype", "b_dtype", "out_dtype")}
        dbl.modules["aiter.ops.flydsl"].flydsl_moe_stage2(
            inter_states=inter_states,
            w2=w2,
            sorted_token_ids=sorted_token_ids,
            sorted_expert_ids=sorted_expert_ids,
            num_valid_ids=num_valid_ids,
            out=out,
            topk=topk,
            **tiles,
            mode=parsed.get("mode", "atomic"),
            w2_scale=w2_scale,
            a2_scale=a2_scale,
            sorted_weights=sorted_weights,
        )
        _dbl_fault(dbl, kernelName, out)

    return _flydsl_stage2_wrapper


def _ck_moe_stage1(dbl):
    def ck_moe_stage1(
        hidden_states,
        w1,
        w2,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        out,
        topk,
        block_m,
        a1_scale,
        w1_scale,
        kernelName="",
        sorted_weights=None,
        quant_type=QuantType.No,
        activation=ActivationType.Gelu,
        splitk=1,
        use_non_temporal_load=False,
        dtype=None,
    ):
        """aiter/fused_moe.py:1600 -- no split-K for per_1x32; straight into aiter.ck_moe_stage1_fwd."""
        routed = (hidden_states, w1, w2, sorted_token_ids, sorted_expert_ids, num_valid_ids, out, topk)
        kernel = (kernelName, w1_scale, a1_scale, block_m, sorted_weights, quant_type, activation)
        dbl.aiter.ck_moe_stage1_fwd(*routed, *kernel, 0, use_non_temporal_load, out.dtype)
        return out

    return ck_moe_stage1


def _cktile_moe_stage1(dbl):
    def cktile_moe_stage1(
        hidden_states,
        w1,
        w2,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        out,
        topk,
        block_m,
        a1_scale,
        w1_scale,
        sorted_weights=None,
        n_pad_zeros=0,
        k_pad_zeros=0,
        bias1=None,
        activation=ActivationType.Silu,
        split_k=1,
        dtype=torch.bfloat16,
    ):
        """aiter/fused_moe.py:1657 -- allocates its own output; split_k > 1 writes gate|up then silu_and_mul."""
        token_num = hidden_states.shape[0]
        result = torch.empty((token_num, topk, w2.shape[2] * 2), dtype=dtype, device=hidden_states.device)
        tmp = result
        if split_k > 1:
            tmp = torch.zeros((token_num, topk, w1.shape[1]), dtype=hidden_states.dtype, device=result.device)
        routed = (sorted_token_ids, sorted_expert_ids, num_valid_ids, topk, n_pad_zeros, k_pad_zeros, sorted_weights)
        dbl.aiter.moe_cktile2stages_gemm1(
            hidden_states, w1, tmp, *routed, a1_scale, w1_scale, bias1, activation, block_m, split_k
        )
        if split_k > 1:
            dbl.aiter.silu_and_mul(result, tmp)
        return result

    return cktile_moe_stage1


def _cktile_moe_stage2(dbl):
    def cktile_moe_stage2(
        a2,
        w1,
        w2,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        out,
        topk,
        w2_scale,
        a2_scale,
        block_m,
        activation=ActivationType.Swiglu,
        sorted_weights=None,
        zeros_out=False,
        n_pad_zeros=0,
        k_pad_zeros=0,
        bias2=None,
    ):
        """aiter/fused_moe.py:1723"""
        routed = (sorted_token_ids, sorted_expert_ids, num_valid_ids, topk, n_pad_zeros, k_pad_zeros, sorted_weights)
        dbl.aiter.moe_cktile2stages_gemm2(a2, w2, out, *routed, a2_scale, w2_scale, bias2, activation, block_m)
        return out

    return cktile_moe_stage2


def _tuned_rows(path, tag: str | None) -> dict:
    """aiter/fused_moe.py's reading of the tuned-fmoe CSV: rows keyed by the index columns, those
    without a `_tag` (tag None) or those with that tag."""
    import pandas as pd

    df = pd.read_csv(path)
    if tag is None and "_tag" in df.columns:
        df = df[df["_tag"].isna() | (df["_tag"] == "")]
    elif tag is not None:
        if "_tag" not in df.columns:
            return {}
        df = df[df["_tag"] == tag]
        if not len(df):
            return {}
    return df.set_index(_INDEX_COLS).to_dict("index")


def _get_2stage_cfgs(dbl):
    fm = dbl.fused_moe

    @functools.lru_cache(maxsize=2048)
    def get_2stage_cfgs(
        token,
        model_dim,
        inter_dim,
        expert,
        topk,
        dtype,
        q_dtype_a,
        q_dtype_w,
        q_type,
        use_g1u1,
        activation,
        doweight_stage1,
        hidden_pad,
        intermediate_pad,
        is_shuffled=True,
    ):
        """aiter/fused_moe.py:675 -- the per_1x32 / fp4x2 / bf16 subset of aiter's branch structure."""
        dbl.calls.append(("get_2stage_cfgs", _dbl_params(get_2stage_cfgs, locals())))
        path = fm.AITER_CONFIGS.AITER_CONFIG_FMOE_FILE
        if fm.cfg_2stages is None:
            fm.cfg_2stages = _tuned_rows(path, None)
        keys = (fm.get_cu_num(), token, model_dim, inter_dim, expert, topk, str(activation), str(dtype))
        keys += (str(q_dtype_a), str(q_dtype_w), str(q_type), use_g1u1, doweight_stage1)
        cfg = fm.cfg_2stages.get(keys, None) if fm.cfg_2stages else None
        if cfg is not None and not fm.is_flydsl_available():
            if any(str(cfg.get(k, "")).startswith("flydsl_") for k in ("kernelName1", "kernelName2")):
                cfg = _tuned_rows(path, "flydsl_fallback").get(keys)
        if cfg is None:
            cfg = dict(
                kernelName1="",
                kernelName2="",
                run_1stage=False,
                block_m=fm.get_block_size_M(token, topk, expert, inter_dim),
                ksplit=fm.get_ksplit(token, topk, expert, inter_dim, model_dim),
                use_nt=(token * topk // expert) < 64,
            )
        if cfg.get("run_1stage", False):
            raise NotImplementedError("double: 1-stage asm path")
        split_k = cfg["ksplit"] > 1 and is_shuffled
        if split_k and dtype == torch.bfloat16 and q_type == QuantType.per_1x32 and q_dtype_w == FP4:
            return _cktile_metadata(fm, token, cfg, activation, use_g1u1, hidden_pad, intermediate_pad)
        kernel1 = cfg["kernelName1"]
        if (kernel1 and "ck2stages" in kernel1) or (not kernel1 and q_dtype_w == FP4):
            return _ck_metadata(dbl, cfg, activation, q_type, dtype)
        raise NotImplementedError("double: asm stage-1 path")

    return get_2stage_cfgs


def _cktile_metadata(fm, token, cfg: dict, activation, use_g1u1, hidden_pad, intermediate_pad) -> MOEMetadata:
    """get_2stage_cfgs' split-K branch: cktile stages on bf16 activations, block_m by token count."""
    ksplit = cfg["ksplit"]
    stage1 = functools.partial(
        fm.cktile_moe_stage1,
        n_pad_zeros=intermediate_pad // 64 * 64 * (2 if use_g1u1 else 1),
        k_pad_zeros=hidden_pad // 128 * 128,
        activation=activation,
        split_k=ksplit,
    )
    stage2 = functools.partial(
        fm.cktile_moe_stage2,
        n_pad_zeros=hidden_pad // 64 * 64,
        k_pad_zeros=intermediate_pad // 128 * 128,
        activation=activation,
    )
    block_m = 16 if token < 2048 else 32 if token < 16384 else 64
    return MOEMetadata(stage1, stage2, block_m, ksplit, cfg.get("run_1stage", False))


def _ck_metadata(dbl, cfg: dict, activation, q_type, dtype) -> MOEMetadata:
    """get_2stage_cfgs' CK branch: CK stage 1, stage 2 on FlyDSL when the row names a FlyDSL kernel
    that can run, else on CK; non-temporal loads only for the heuristic's sparse shapes."""
    fm = dbl.fused_moe
    kernel2, use_nt, ksplit = cfg["kernelName2"], cfg.get("use_nt", False), cfg["ksplit"]
    if kernel2 and kernel2.startswith("flydsl_") and fm.is_flydsl_available():
        stage2 = functools.partial(fm._flydsl_stage2_wrapper, kernelName=kernel2)
    else:
        stage2 = functools.partial(
            dbl.aiter.ck_moe_stage2_fwd,
            kernelName=kernel2,
            activation=activation,
            quant_type=q_type,
            use_non_temporal_load=use_nt,
        )
    stage1 = functools.partial(
        fm.ck_moe_stage1,
        kernelName=cfg["kernelName1"],
        activation=activation,
        quant_type=q_type,
        dtype=dtype,
        splitk=ksplit,
        use_non_temporal_load=use_nt,
    )
    return MOEMetadata(stage1, stage2, cfg["block_m"], int(ksplit), cfg.get("run_1stage", False))


def _moe_sorting(dbl):
    def moe_sorting(topk_ids, topk_weights, num_experts, model_dim, moebuf_dtype, block_size=32, *_args):
        """aiter/fused_moe.py:80 / :37 -- allocate and run moe_sorting_fwd."""
        m, topk = topk_ids.shape
        max_padded = int(topk_ids.numel() + num_experts * block_size - topk)
        max_blocks = (max_padded + block_size - 1) // block_size
        dev = topk_ids.device
        sorted_ids = torch.empty(max_padded, dtype=torch.int32, device=dev)
        sorted_w = torch.empty(max_padded, dtype=torch.float32, device=dev)
        sorted_e = torch.empty(max_blocks, dtype=torch.int32, device=dev)
        num_valid = torch.empty(2, dtype=torch.int32, device=dev)
        moe_buf = torch.empty((m, model_dim), dtype=moebuf_dtype, device=dev)
        buffers = (sorted_ids, sorted_w, sorted_e, num_valid, moe_buf)
        dbl.aiter.moe_sorting_fwd(topk_ids, topk_weights, *buffers, num_experts, block_size, None, None, 0)
        return buffers

    return moe_sorting


def _fused_moe(dbl):
    fm = dbl.fused_moe

    def fused_moe(
        hidden_states,
        w1,
        w2,
        topk_weight,
        topk_ids,
        expert_mask=None,
        activation=ActivationType.Silu,
        quant_type=QuantType.No,
        doweight_stage1=False,
        w1_scale=None,
        w2_scale=None,
        a1_scale=None,
        a2_scale=None,
        block_size_M=None,
        num_local_tokens=None,
        moe_sorting_dispatch_policy=0,
        dtype=None,
        hidden_pad=0,
        intermediate_pad=0,
        bias1=None,
        bias2=None,
        splitk=0,
    ):
        """aiter/fused_moe.py:128 -> fused_moe_ :216 -> fused_moe_2stages :1025, per_1x32 / Silu / bf16 only."""
        dbl.calls.append(("fused_moe", _dbl_params(fused_moe, locals())))
        if quant_type != QuantType.per_1x32 or activation != ActivationType.Silu or expert_mask is not None:
            raise NotImplementedError("double: fused_moe covers per_1x32 Silu without expert mask")
        m, topk = topk_ids.shape
        n_exp, model_dim, inter_dim = fm.get_inter_dim(w1.shape, w2.shape)
        is_shuffled = getattr(w1, "is_shuffled", False)
        out_dtype = hidden_states.dtype if dtype is None else dtype
        shape = (fm.get_padded_M(m), model_dim, inter_dim, n_exp, topk, out_dtype, FP4, w1.dtype, quant_type)
        md = fm.get_2stage_cfgs(
            *shape, inter_dim != w1.shape[1], activation, doweight_stage1, hidden_pad, intermediate_pad, is_shuffled
        )
        block_m = int(md.block_m if block_size_M is None else block_size_M)
        sorting = fm.moe_sorting(topk_ids, topk_weight, n_exp, model_dim, out_dtype, block_m)
        bf16_acts = md.ksplit > 1 and is_shuffled  # the split-K path: cktile stages, no activation quantization
        return _fused_moe_2stages(
            fm, md, hidden_states, w1, w2, w1_scale, w2_scale, topk_ids, sorting, block_m, doweight_stage1, bf16_acts
        )

    return fused_moe


def _fused_moe_2stages(fm, md, hidden_states, w1, w2, w1_scale, w2_scale, topk_ids, sorting, block_m, weight1, bf16):
    """aiter/fused_moe.py:1025 fused_moe_2stages for per_1x32: the activations quantized in sorted
    order (bf16 and no scales on the split-K path), stage 1, the same for its output, stage 2 into
    moe_sorting's output buffer; the routing weights applied in stage 1 (weight1) or stage 2."""
    sorted_ids, sorted_w, sorted_e, num_valid, moe_buf = sorting
    m, topk = topk_ids.shape
    inter_dim = fm.get_inter_dim(w1.shape, w2.shape)[2]
    quant = functools.partial(
        fm.fused_dynamic_mxfp4_quant_moe_sort,
        sorted_ids=sorted_ids,
        num_valid_ids=num_valid,
        token_num=m,
        block_size=block_m,
    )
    routed = (sorted_ids, sorted_e, num_valid)
    a1, a1s = (hidden_states.to(moe_buf.dtype), None) if bf16 else quant(hidden_states, topk=1)
    a2 = torch.empty((m, topk, inter_dim), dtype=moe_buf.dtype, device=hidden_states.device)
    a2 = md.stage1(
        a1,
        w1,
        w2,
        *routed,
        a2,
        topk,
        block_m=block_m,
        a1_scale=a1s,
        w1_scale=w1_scale.view(E8M0),
        sorted_weights=sorted_w if weight1 else None,
    )
    a2, a2s = (a2, None) if bf16 else quant(a2.view(-1, inter_dim), topk=topk)
    md.stage2(
        a2.view(m, topk, -1),
        w1,
        w2,
        *routed,
        moe_buf,
        topk,
        w2_scale=w2_scale.view(E8M0),
        a2_scale=a2s,
        block_m=block_m,
        sorted_weights=sorted_w if not weight1 else None,
    )
    return moe_buf
