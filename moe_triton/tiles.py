"""The rows of the Triton backend's tile tables (tiles_nvidia.py, tiles_amd.py, keyed by
problem.shapes.Shape), the routing-block rule both targets' defaults start from, and the Shape check
of the lookups; what each field means: docs/tiles.md."""

import dataclasses
from dataclasses import dataclass

from problem.shapes import Shape

STAGE_FIELDS = ("block_n", "block_k", "warps", "stages")


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One GEMM's tile: block_n output columns (stage 1: columns of h) by block_k of K per step."""

    block_n: int
    block_k: int
    warps: int
    stages: int


def _stage_field(stage: str, name: str) -> property:
    return property(lambda tiles: getattr(getattr(tiles, stage), name), doc=f"{stage}.{name}")


# 32-blocks per quantizing program of the routing launches, measured on the H200 (2026-11-30,
# bench/notes/decode-path-1-4.md, "a separate route launch"; longer programs lost on 2026-12-07).
QUANT_BLOCKS = 16


@dataclass(frozen=True, kw_only=True, repr=False)
class Tiles:
    """What both paths' tiles hold (docs/tiles.md, "A row"); the launchers, replace, as_dict and the
    variant files read the stages' fields flat (block_n1, stages2, ...)."""

    block_m: int
    stage1: Stage
    stage2: Stage
    n_tiles2: int
    quant_blocks: int = QUANT_BLOCKS

    def __post_init__(self):
        # Every call's plan key holds the tiles: hashed once here, not field by field per call.
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self))))

    def __hash__(self) -> int:
        return self._hash

    block_n1 = _stage_field("stage1", "block_n")
    block_k1 = _stage_field("stage1", "block_k")
    warps1 = _stage_field("stage1", "warps")
    stages1 = _stage_field("stage1", "stages")
    block_n2 = _stage_field("stage2", "block_n")
    block_k2 = _stage_field("stage2", "block_k")
    warps2 = _stage_field("stage2", "warps")
    stages2 = _stage_field("stage2", "stages")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The fields by their flat names, the stages' spelled block_n1 ... stages2."""
        names = []
        for field in dataclasses.fields(cls):
            stage = field.name.removeprefix("stage")
            names += [f"{name}{stage}" for name in STAGE_FIELDS] if stage in ("1", "2") else [field.name]
        return tuple(names)

    @classmethod
    def from_dict(cls, fields: dict) -> "Tiles":
        """The tiles of as_dict's flat fields (a JSON log's, a variant file's)."""
        rest = dict(fields)
        stages = {f"stage{s}": Stage(**{name: rest.pop(f"{name}{s}") for name in STAGE_FIELDS}) for s in "12"}
        return cls(**stages, **rest)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.field_names()}

    def replace(self, **changes) -> "Tiles":
        """A copy with `changes`, by flat field names."""
        return self.from_dict({**self.as_dict(), **changes})

    def __repr__(self) -> str:
        """The row as the tables write it: by keyword, the fields left at their defaults omitted."""
        shown = [
            f"{field.name}={getattr(self, field.name)!r}"
            for field in dataclasses.fields(self)
            if field.default is dataclasses.MISSING or getattr(self, field.name) != field.default
        ]
        return f"{type(self).__name__}({', '.join(shown)})"


@dataclass(frozen=True, kw_only=True, repr=False)
class TileConfig(Tiles):
    """The decode path's tiles (NVIDIA, the CPU interpreter, ROCm GPUs but gfx950): register caps,
    tail launches and the Gluon stages (docs/tiles.md, "TileConfig")."""

    __hash__ = Tiles.__hash__

    max_regs1: int = 0
    tail_m: int = 0
    max_regs2: int = 0
    gluon1: int = 0
    gluon2: int = 0
    fold1: int = 0
    fold2: int = 0
    paired1: int = 0
    overlap: int = 0
    route_launches: int = 2
    slot_span1: int = 32
    slot_span2: int = 32


@dataclass(frozen=True, kw_only=True, repr=False)
class NativeTileConfig(Tiles):
    """The native gfx950 path's tiles: MFMA width, occupancy hint and the kernel variants, each off by
    default (docs/tiles.md, "NativeTileConfig")."""

    __hash__ = Tiles.__hash__

    nonkdim: int = 16
    waves_per_eu: int = 0
    xcds: int = 0
    weight_cache: str = ""
    fused_quant: bool = False
    route_launches: int = 2


def check_sizes(tiles: Tiles) -> None:
    """A ValueError naming the first size field that no kernel can take: the routing blocks, the
    stages' tiles and the routing launches' quantizing programs index with power-of-two ranges, and a ring
    or a chain needs one slot or tile at least."""
    powers = ("block_m", "block_n1", "block_k1", "warps1", "block_n2", "block_k2", "warps2", "quant_blocks")
    for name in powers + ("stages1", "stages2", "n_tiles2"):
        value = getattr(tiles, name)
        if type(value) is not int or value < 1 or (name in powers and value & (value - 1)):
            kind = "a power of two" if name in powers else "a positive integer"
            raise ValueError(f"tiles: {name} must be {kind}, not {value!r}")


def checked_shape(shape: Shape) -> Shape:
    """shape itself, or a TypeError naming it: a plain tuple may hold the sizes in another order."""
    if not isinstance(shape, Shape):
        raise TypeError(f"shape: expected a problem.shapes.Shape, got {type(shape).__name__} {shape!r}")
    return shape


def default_block_m(shape: Shape) -> int:
    """Small routing blocks while experts see few rows each, larger ones when they see many."""
    rows_per_expert = shape.n_tokens * shape.topk / shape.n_experts
    return 16 if rows_per_expert <= 24 else 32 if rows_per_expert <= 96 else 128
