"""3GPP TR 38.901 large-scale channel (§7.4): path loss, LOS probability and log-normal shadow
fading with exponential correlation over distance, for the UMa, UMi street canyon and InH
(mixed office) environments.

The coefficients are not typed here: they are read from the ``tr3gpp`` package (its TR 38.901
v19.4.0 tables, hand-verified against the standard by its maintainers): the path-loss formulas
(Table 7.4.1-1, parsed term by term: an unknown term is refused, so a changed table fails
loudly), the LOS probabilities (Table 7.4.2-1), the shadow-fading standard deviations (Table
7.4.1-1) and their correlation distances (Table 7.5-6). What the standard states outside those
tables is written here: the breakpoint distance d'_BP = 4 h'_BS h'_UT f_c / c with effective
heights h' = h − 1 m (h_E = 1 m, which holds with probability 1 for h_UT < 13 m, Note 1), and
d_3D = √(d_2D² + (h_BS − h_UT)²).

Validity, as the standard gives it: UMa and UMi for 10 m ≤ d_2D ≤ 5 km, InH for 1 m ≤ d_3D ≤ 150 m;
1.5 m ≤ h_UT ≤ 13 m here (above 13 m UMa's LOS probability and h_E change; not modelled).
Units: distances and heights in m, f_c in GHz, losses in dB (positive: a loss).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

import numpy as np

from multispin.errors import ConfigError
from multispin.system.radio import SPEED_OF_LIGHT_M_PER_S

EFFECTIVE_ENVIRONMENT_HEIGHT_M = 1.0  # h_E (Note 1 of Table 7.4.1-1, h_UT < 13 m)
MAX_UT_HEIGHT_M = 13.0

# environment -> (path-loss table name, LOS-probability table name, Table 7.5-6 name, default h_BS)
ENVIRONMENTS = {
    "uma": ("UMa", "UMa", "UMa", 25.0),
    "umi": ("UMi-StreetCanyon", "UMi-StreetCanyon", "UMi - Street Canyon", 10.0),
    "inh": ("InH-Office", "Indoor-MixedOffice", "Indoor-Office", 3.0),
}
DISTANCE_RANGE_M = {"uma": (10.0, 5000.0), "umi": (10.0, 5000.0), "inh": (1.0, 150.0)}  # d_2D (InH: d_3D)


@dataclass(frozen=True)
class LinearLaw:
    """PL = const + d·log10(d_3D) + f·log10(f_c) + bp·log10(d'_BP² + (h_BS − h_UT)²) + h·(h_UT − h0)."""

    const: float = 0.0
    d: float = 0.0
    f: float = 0.0
    bp: float = 0.0
    h: float = 0.0
    h0: float = 0.0

    def __call__(self, d3d, fc_ghz: float, d_bp: float, h_bs: float, h_ut: float):
        out = self.const + self.d * np.log10(d3d) + self.f * math.log10(fc_ghz) + self.h * (h_ut - self.h0)
        if self.bp:
            out = out + self.bp * math.log10(d_bp**2 + (h_bs - h_ut) ** 2)
        return out


@dataclass(frozen=True)
class Environment:
    name: str
    los: tuple[LinearLaw, ...]  # (PL_1, PL_2) with a breakpoint, or (PL,)
    nlos: LinearLaw  # PL'_NLOS; the NLOS loss is max(PL_LOS, PL'_NLOS)
    los_probability: tuple[float, ...]  # the table's numbers, in the order `los_probability` reads them
    shadow_std_db: dict[str, float]  # "LOS"/"NLOS" -> σ_SF
    correlation_m: dict[str, float]  # "LOS"/"NLOS" -> d_cor of the shadow fading
    default_bs_height_m: float


_NUM = r"([0-9]+(?:\.[0-9]+)?)"


def _term(*parts: str) -> re.Pattern:
    """A term pattern: literal text (escaped) between number groups (``None`` marks a number)."""
    return re.compile("^" + "".join(_NUM if p is None else re.escape(p) for p in parts) + "$")


_LOG = "\\log_{10}"
_TERMS = [
    (_term(None, _LOG + "(d_{3D})"), "d"),
    (_term(None, _LOG + "(f_c)"), "f"),
    (_term(None, _LOG + "((d'_{BP})^2 + (h_{BS}-h_{UT})^2)"), "bp"),
    (_term(None, "(h_{UT} - ", None, ")"), "h"),
    (_term(None), "const"),
]


def _split_terms(expr: str) -> list[tuple[int, str]]:
    """(sign, term) of a sum, split on + and − outside parentheses and braces."""
    terms, depth, start, sign = [], 0, 0, 1
    for i, ch in enumerate(expr):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch in "+-" and depth == 0 and i > 0:
            terms.append((sign, expr[start:i].strip()))
            sign, start = (1 if ch == "+" else -1), i + 1
    terms.append((sign, expr[start:].strip()))
    return [(s, t) for s, t in terms if t]


def parse_law(expr: str) -> LinearLaw:
    """A path-loss expression of the table as a `LinearLaw`; a term it does not know is refused."""
    fields: dict[str, float] = {}
    for sign, term in _split_terms(expr):
        for pattern, name in _TERMS:
            m = pattern.match(term)
            if m:
                fields[name] = fields.get(name, 0.0) + sign * float(m.group(1))
                if name == "h":
                    fields["h0"] = float(m.group(2))
                break
        else:
            raise ConfigError(f"tr3gpp: cannot read the path-loss term {term!r} of {expr!r}")
    return LinearLaw(**fields)


def _equations(formula: str) -> dict[str, str]:
    """NAME = EXPR pieces of a formula (separated by ``;`` and ``\\quad``)."""
    out = {}
    for piece in re.split(r";\s*\\quad|;", formula):
        if "=" in piece:
            name, expr = piece.split("=", 1)
            out[name.strip()] = re.sub(r",?\s*\\text\{.*$", "", expr).strip()
    return out


def _numbers(pattern: str, text: str) -> tuple[float, ...]:
    m = re.search(pattern, text)
    if m is None:
        raise ConfigError(f"tr3gpp: the LOS-probability formula changed shape ({text[:80]}…)")
    return tuple(float(g) for g in m.groups())


@cache
def environment(name: str) -> Environment:
    """An environment's coefficients, read from the tr3gpp tables (cached)."""
    if name not in ENVIRONMENTS:
        raise ConfigError(
            f"radio.path_loss_model: unknown 3GPP environment {name!r} (allowed: {', '.join(ENVIRONMENTS)})"
        )
    try:
        # lazy: slow to import, and only the 3GPP path-loss models read it
        from tr3gpp import tr38901  # noqa: PLC0415
    except ImportError:
        raise ConfigError(
            "radio.path_loss_model: 3GPP TR 38.901 needs the tr3gpp package (pip install tr3gpp)"
        ) from None
    pl_name, los_name, lsp_name, h_bs = ENVIRONMENTS[name]
    s74, s75 = tr38901.section("7.4"), tr38901.section("7.5")
    los_entry, nlos_entry = (
        s74.pathloss(scenario=pl_name, condition="LOS"),
        s74.pathloss(scenario=pl_name, condition="NLOS"),
    )
    los_eq, nlos_eq = _equations(los_entry.formula), _equations(nlos_entry.formula)
    los = (
        tuple(parse_law(los_eq[k]) for k in ("PL_1", "PL_2"))
        if "PL_1" in los_eq
        else (parse_law(next(iter(los_eq.values()))),)
    )
    nlos = parse_law(next(v for k, v in nlos_eq.items() if k.startswith("PL'")))
    prob = s74.los_probability(scenario=los_name).formula
    if name == "inh":
        numbers = _numbers(r"d_\{2D-in\} \\le ([0-9.]+)m", prob)
        numbers += _numbers(
            r"\\dfrac\{d_\{2D-in\}-([0-9.]+)\}\{([0-9.]+)\}.*?\\dfrac\{d_\{2D-in\}-([0-9.]+)\}\{([0-9.]+)\}", prob
        )
        numbers += _numbers(r"\\cdot ([0-9.]+)", prob)
    else:
        numbers = _numbers(r"d_\{2D-out\} \\le ([0-9.]+)m", prob)
        numbers += _numbers(r"\\exp\\left\(-\\dfrac\{d_\{2D-out\}\}\{([0-9.]+)\}\\right\)", prob)
    return Environment(
        name,
        los,
        nlos,
        numbers,
        {c: float(e.shadow_fading_std_db[0].value_db) for c, e in (("LOS", los_entry), ("NLOS", nlos_entry))},
        {
            c: float(s75.channel_model_parameters(scenario=lsp_name, condition=c).corr_distance_SF_m)
            for c in ("LOS", "NLOS")
        },
        h_bs,
    )


def breakpoint_m(fc_ghz: float, h_bs: float, h_ut: float) -> float:
    """d'_BP = 4 h'_BS h'_UT f_c / c, h' = h − h_E."""
    h_e = EFFECTIVE_ENVIRONMENT_HEIGHT_M
    return 4 * (h_bs - h_e) * (h_ut - h_e) * fc_ghz * 1e9 / SPEED_OF_LIGHT_M_PER_S


def path_loss_db(env: str, d2d, fc_ghz: float, los, h_bs: float | None = None, h_ut: float = 1.5) -> np.ndarray:
    """Path loss (dB) at 2D distances ``d2d`` for LOS (True) or NLOS (False) links (arrays broadcast)."""
    e = environment(env)
    h_bs = e.default_bs_height_m if h_bs is None else h_bs
    d2d = np.asarray(d2d, dtype=float)
    d3d = np.sqrt(d2d**2 + (h_bs - h_ut) ** 2)
    d_bp = breakpoint_m(fc_ghz, h_bs, h_ut)
    if len(e.los) == 2:
        pl_los = np.where(d2d <= d_bp, e.los[0](d3d, fc_ghz, d_bp, h_bs, h_ut), e.los[1](d3d, fc_ghz, d_bp, h_bs, h_ut))
    else:
        pl_los = e.los[0](d3d, fc_ghz, d_bp, h_bs, h_ut)
    pl_nlos = np.maximum(pl_los, e.nlos(d3d, fc_ghz, d_bp, h_bs, h_ut))
    return np.where(np.asarray(los, dtype=bool), pl_los, pl_nlos)


def los_probability(env: str, d2d) -> np.ndarray:
    """Pr_LOS at 2D distances ``d2d`` (outdoor: d_2D-out; InH: d_2D-in), h_UT ≤ 13 m."""
    n = environment(env).los_probability
    d = np.asarray(d2d, dtype=float)
    if env == "inh":
        near, a0, a1, b0, b1, scale = n
        return np.where(d <= near, 1.0, np.where(d < b0, np.exp(-(d - a0) / a1), np.exp(-(d - b0) / b1) * scale))
    near, decay = n
    safe = np.maximum(d, near)
    return np.where(d <= near, 1.0, near / safe + np.exp(-safe / decay) * (1 - near / safe))


def correlated_normal(positions: np.ndarray, correlation_m: float, rng: np.random.Generator) -> np.ndarray:
    """Standard normals at ``positions`` (K, 2) with correlation exp(−|Δx| / d_cor) (TR 38.901
    eq. 7.4-5), by a Cholesky factor of the K × K correlation matrix."""
    diff = positions[:, None, :] - positions[None, :, :]
    corr = np.exp(-np.linalg.norm(diff, axis=-1) / correlation_m)
    chol = np.linalg.cholesky(corr + 1e-12 * np.eye(len(positions)))
    return chol @ rng.standard_normal(len(positions))


@dataclass(frozen=True)
class LargeScaleDrop:
    """One drop's large-scale channel per device: LOS state, shadow fading, total loss and gain."""

    los: np.ndarray
    shadow_db: np.ndarray
    loss_db: np.ndarray

    @property
    def gain(self) -> np.ndarray:
        return 10.0 ** (-self.loss_db / 10.0)


def draw_large_scale(
    env: str,
    positions: np.ndarray,
    fc_ghz: float,
    rng: np.random.Generator,
    *,
    h_bs: float | None = None,
    h_ut: float = 1.5,
    shadowing: bool = True,
) -> LargeScaleDrop:
    """LOS states (Bernoulli of Pr_LOS), correlated shadow fading (one field per condition, each
    with its σ and d_cor; a device takes its condition's) and the loss, for devices at
    ``positions`` (K, 2), the base station at the origin."""
    e = environment(env)
    positions = np.asarray(positions, dtype=float).reshape(-1, 2)
    d2d = np.linalg.norm(positions, axis=1)
    los = rng.random(d2d.size) < los_probability(env, d2d)
    shadow = np.zeros(d2d.size)
    if shadowing:
        for cond, mask in (("LOS", los), ("NLOS", ~los)):
            field = correlated_normal(positions, e.correlation_m[cond], rng) * e.shadow_std_db[cond]
            shadow = np.where(mask, field, shadow)
    return LargeScaleDrop(los, shadow, path_loss_db(env, d2d, fc_ghz, los, h_bs, h_ut) + shadow)
