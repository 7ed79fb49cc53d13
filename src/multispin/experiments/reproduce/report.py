"""report.md: the checked claims, assumptions, the identification study, every figure with its PNG, CSV columns."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from types import ModuleType

import numpy as np

from multispin._version import __version__
from multispin.experiments.reproduce import fig_channel_knowledge, identification
from multispin.experiments.reproduce.claims import SETTING_CLAIMS, read_settings
from multispin.experiments.reproduce.columns import DROP_DOCS, doc_for, read_csv
from multispin.experiments.reproduce.config import RunConfig
from multispin.system import get_preset


def _duration(seconds: float) -> str:
    """``40 s``, ``12 min``: a rough duration in the unit a reader takes in at a glance."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _num(v, d=2) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return "n/a" if math.isnan(f) else f"{f:.{d}f}"


def _assumptions(cfg: RunConfig, settings: dict) -> str:
    lines = ["## Assumptions", ""]
    for preset in cfg.presets:
        sc = get_preset(preset)
        acc = ", ".join(f"{k} {v:g}" for k, v in sorted(sc.tasks.acceptance.items()))
        how = (
            f"**assumed** inside the paper's range 0.82–0.95: {acc}"
            if sc.tasks.assumed
            else f"**measured**: {acc} ({sc.tasks.source})"
        )
        lines.append(
            f"- **{preset}**: per-task acceptance rates α (per token, i.i.d.) {how}; each device draws "
            f"one task uniformly. Draft latency "
            f"{1e3 * sc.devices.draft_latency_s_per_token:g} ms/token × U[1, {sc.devices.draft_latency_jitter_max:g}], "
            f"T_ver^0 = {1e3 * sc.compute.t_ver0_s:g} ms, T_ver^1 = {1e3 * sc.compute.t_ver1_s:g} ms/device."
        )
    lines += [
        f"- **Noise figure**: {_num(settings.get('noise_figure_db'), 1)} dB on top of N0 = −174 dBm/Hz at both ends: "
        "one physical receiver noise figure (device radios have about 5–9 dB), the presets' and every verb's "
        "default. The paper does not publish its noise level; it is not tuned here: the identification study "
        "(figure 7) scores every claim from 0 to 30 dB.",
        f"- **N_SAA** = {settings.get('n_saa')} SAA outcome samples per drop at every point of every figure (fewer "
        "samples change the plans: they are never traded for speed; slow points get fewer drops instead). Each "
        "policy's goodput is its SAA value on the samples it was optimised on (slightly optimistic for every "
        "policy alike; the comparisons are paired on the same samples).",
        f"- **Drops**: {settings.get('drops_per_point')} independent drops per point of figures 1–6 (fewer at "
        f"large K in figure 2, see its `n_drops`), {settings.get('identification_drops_per_point')} in the "
        "identification study, with common random numbers across its settings. A drop redraws device distances "
        "(uniform in [100, 500] m), tasks, draft latencies, Rayleigh fading and the SAA samples; its seed is a hash "
        f"of (base seed {settings.get('seed')}, study, point, drop index). Bands and brackets are 95% confidence "
        "intervals of the mean over drops: Student t for signed quantities, an expanded-percentile bootstrap for "
        "non-negative ones (goodputs, draft lengths, fractions: never below 0). Gains are gains of means, "
        "100·(mean G / mean G_baseline − 1), over the same drops, with a paired delta-method interval (`gom_*`); "
        "per-drop gains are in `drops/`.",
        "- **One round per drop**: the optimiser plans round 0 of each drop (block fading: the channel is fixed "
        "within the round). Goodput is the SAA estimate of the ratio of expectations G of docs/system-model.md §3.",
        f"- **Payload**: S = {settings.get('payload_bits')} bits (sparse top-1024, the paper's model); drafting uploads "
        "and correction ids are not counted (as in the paper). Equal bandwidth split unless said otherwise.",
        "- **Policies**: adaptive = the shipped planner (`multispin.optimize.plan`: a multi-start local search with "
        "line search per device, joint shifts and group on/off moves, started from every baseline's γ; optimal "
        "UL/DL modes); every mode baseline gets its own draft lengths from the same planner on the same samples; "
        "draft-length baselines use optimal modes (docs/system-model.md §5.3). Claims 6 and 7 are judged for the shipped "
        "search (6, 7) and for the paper's two-phase greedy (6p, 7p).",
        "- **Extensions** (figure 5): the optimised bandwidth split is evaluated at the adaptive plan's draft lengths "
        "(not re-planned: a lower bound on its gain); the lattice codec is re-planned. In DL mode the lattice codec "
        "is exact only when the target row is representable on the lattice (e.g. greedy sampling); otherwise it is "
        "an approximation (`multispin.speculative.codecs`).",
        "",
    ]
    return "\n".join(lines)


def _identification_section(out: Path) -> str:
    p = out / identification.SETTINGS_CSV
    if not p.exists():
        return "## Identification of the unpublished settings\n\nThe identification study was not part of this run.\n"
    st = read_csv(p)
    f = identification.findings(st)
    lines = [
        "## Identification of the unpublished settings",
        "",
        "The paper does not publish its noise level, whether verification cost grows with the batch's tokens, "
        "its per-task acceptance rates (only their range) or how its curves treat fading. Figure 7 scores every "
        "claim one setting can test (K = 20, main pair, a P^dl/P^ul sweep; claims 2 and 8 need the K sweep and "
        "the defaults) at each setting, on the same drops. No setting is chosen from this table: the run uses "
        "the physical default above.",
        "",
        identification.describe(read_csv(out / f"{identification.NAME}.csv")),
        "",
    ]
    header = ["setting", "γ̄ at 4 (drafting)", "γ̄ at 16 (drafting)"] + [f"claim {c}" for c in SETTING_CLAIMS]
    body = [
        [
            s["setting"],
            f"{_num(s['gamma_mean_at_4'], 1)} ({_num(100 * float(s['drafting_share_at_4']), 0)}%)",
            f"{_num(s['gamma_mean_at_16'], 1)} ({_num(100 * float(s['drafting_share_at_16']), 0)}%)",
        ]
        + [s[f"claim_{c}"] for c in SETTING_CLAIMS]
        for s in st
    ]
    lines += [_table(header, body), ""]
    if f["conflicts"] or f["never"]:
        lines.append(
            "A mechanism that would explain a conflict between claims 5 and 7 (check it against the rows "
            "above): the draft-length trend needs rounds whose cost is dominated by communication, so that "
            "more DL power buys longer drafts, while a gain of only 5–10% over computation-only needs "
            "rounds dominated by computation, where ignoring communication costs little. The per-setting "
            f"numbers behind each status are in `{identification.SETTINGS_CSV}` (`measured_*`)."
        )
        lines.append("")
    return "\n".join(lines)


def _holds_at(out: Path) -> dict[str, str]:
    """Per claim id: the identification settings at which it holds."""
    p = out / identification.SETTINGS_CSV
    if not p.exists():
        return {}
    f = identification.findings(read_csv(p))
    return {c: "; ".join(v) if v else "none" for c, v in f["holds_at"].items()}


def _claims_section(claims, out: Path) -> str:
    counts = {st: sum(c.status == st for c in claims) for st in ("PASS", "FAIL", "INCONCLUSIVE", "N/A")}
    holds = _holds_at(out)

    def where(c) -> str:
        return holds.get(c.id.split(" ")[0], "—")

    header = ["id", "claim", "criterion", "measured", "status", "holds at (identification, K = 20)", "source"]
    lines = [
        "## Checked claims (docs/system-model.md §6)",
        "",
        ", ".join(f"{n} {st}" for st, n in counts.items()) + ". Computed by "
        "`multispin.experiments.reproduce.claims` from the CSVs of this directory (also in `claims.csv`), each "
        "claim from one table; PASS only where the 95% intervals exclude the opposite. The last-but-one column "
        f"comes from `{identification.SETTINGS_CSV}`.",
        "",
        _table(
            header,
            [[c.id, c.claim, c.criterion, c.measured, f"**{c.status}**", where(c), f"`{c.source}`"] for c in claims],
        ),
        "",
    ]
    return "\n".join(lines)


def _drop_values(out: Path, study: str, column: str) -> list[float]:
    """A study's per-drop values of `column` (drops/<study>.csv), blanks left out; [] without the file."""
    p = out / "drops" / f"{study}.csv"
    if not p.exists():
        return []
    return [float(r[column]) for r in read_csv(p) if r.get(column) not in (None, "")]


def _optimiser_notes(out: Path) -> str:
    """How far the shipped draft-length search is from the best γ known in each drop."""
    lines = []
    for study, against in (
        (
            "pdl",
            "every draft-length baseline's γ and a slow reference search (iterated local "
            "search from random points and kicks)",
        ),
        ("users", "every mode baseline's γ"),
    ):
        short = _drop_values(out, study, "greedy_shortfall_pct")
        if not short:
            continue
        lines.append(
            f"- study `{study}` ({len(short)} drops), against {against}: shortfall > 0.5% in "
            f"{sum(s > 0.5 for s in short)} drops, largest {max(short):.3g}%."
        )
    if not lines:
        return ""
    return "\n".join(
        [
            "## Note on the draft-length search",
            "",
            "Diagnostic `greedy_shortfall_pct`: the optimal-mode goodput at the best draft lengths found in the same "
            "drop by any policy (and, where run, by a slow reference search), relative to the shipped plan. The "
            "shipped search starts from every baseline's γ, so it is never below them; a positive value means another "
            "search found a better local optimum.",
            "",
            *lines,
            "",
        ]
    )


CERTIFICATE_TARGET_PCT = 5.0  # the claim: median gap to the communication-aware bound at most this


def _certificate_section(out: Path, studies=("pdl", "users", "resources", "extensions", "identification")) -> str:
    """The gap distribution to the communication-aware bound (`gap_comm_bound_pct`), per study."""
    lines = []
    for study in studies:
        gaps = sorted(_drop_values(out, study, "gap_comm_bound_pct"))
        if not gaps:
            continue
        med, p90 = float(np.median(gaps)), float(np.percentile(gaps, 90))
        verdict = "meets" if med <= CERTIFICATE_TARGET_PCT else "misses"
        lines.append(
            f"- study `{study}` ({len(gaps)} drops): median {med:.2f}%, 90th percentile {p90:.2f}%, "
            f"max {gaps[-1]:.2f}% ({verdict} the ≤ {CERTIFICATE_TARGET_PCT:g}% median target)"
        )
    if not lines:
        return ""
    return "\n".join(
        [
            "## The certificate: gap to the communication-aware bound",
            "",
            "`gap_comm_bound_pct` = 100·(1 − G / bound): no draft lengths reach more than the bound on the drop's own "
            "SAA samples (docs: the optimiser's certificate), so the gap caps what any better search could add. It "
            "includes the bound's own slack: a large gap proves nothing either way.",
            "",
            *lines,
            "",
        ]
    )


def _columns_section(out: Path, modules: list[ModuleType]) -> str:
    lines = [
        "## CSV columns",
        "",
        "Every figure CSV has one row per point: its parameters, `n_drops`, and for each metric `m` the mean over "
        "drops `m` with its 95% confidence interval `m_lo`, `m_hi` (and `m_n`, the drops that define it, for "
        "metrics undefined in some drops). `drops/<study>.csv` has one row per drop with the same metric names "
        "(no `_lo`/`_hi`), plus:",
        "",
    ]
    lines += [_table(["column", "meaning"], [[f"`{k}`", v] for k, v in DROP_DOCS.items()]), ""]
    for m in modules:
        p = out / f"{m.NAME}.csv"
        if not p.exists():
            continue
        with open(p) as f:
            cols = f.readline().strip().split(",")
        base = [c for c in cols if not (c.endswith("_lo") or c.endswith("_hi") or c.endswith("_n"))]
        lines += [f"### `{m.NAME}.csv`", "", _table(["column", "meaning"], [[f"`{c}`", doc_for(c)] for c in base]), ""]
    p = out / identification.SETTINGS_CSV
    if p.exists():
        lines += [
            f"### `{identification.SETTINGS_CSV}`",
            "",
            _table(["column", "meaning"], [[f"`{k}`", v] for k, v in identification.SETTINGS_DOCS.items()]),
            "",
        ]
    lines += [
        "### `settings.csv`, `claims.csv`",
        "",
        "`settings.csv`: key/value pairs of the run's defaults (what claim 8 checks). `claims.csv`: the table "
        "above (id, claim, criterion, measured, status, source).",
        "",
    ]
    return "\n".join(lines)


def counterpart(cid: str, theirs: dict):
    """The entry of ``theirs`` for claim ``cid``: the same id, else the same claim of the one pair
    the other run had (``5 (Qwen)`` against ``5 (measured-smollm2-a100)``); ``None`` when absent."""
    cid = str(cid)
    if cid in theirs:
        return theirs[cid]
    base = cid.split(" (")[0]
    same = [k for k in theirs if str(k).split(" (")[0] == base]
    return theirs[same[0]] if len(same) == 1 else None


def _comparison_section(claims, other: Path | None) -> str:
    """The claim verdicts of this run beside another run's (``--compare-with``), e.g. the paper's
    assumed acceptance beside a measured table, and which verdicts change."""
    if other is None:
        return ""
    other = Path(other)
    path = other / "claims.csv"
    if not path.is_file():
        return f"## Claims beside `{other}`\n\nNo `claims.csv` in `{other}`: nothing to compare.\n"
    theirs = {str(r["id"]): r for r in read_csv(path)}  # read_csv reads "2" as a number
    pairs = ""
    with contextlib.suppress(OSError, ValueError, KeyError):
        pairs = f" (scenario {json.loads((other / 'run.json').read_text())['config']['preset']})"
    rows, changed = [], []
    for c in claims:
        t = (counterpart(str(c.id), theirs) or {}).get("status", "–")
        rows.append([c.id, c.claim, f"**{c.status}**", t, "yes" if t != c.status else ""])
        if t != c.status:
            changed.append(f"claim {c.id}: {t} there, {c.status} here")
    lines = [
        f"## Claims beside `{other}`{pairs}",
        "",
        "Each claim's verdict in this run next to the other run's (same checker, each on its own tables).",
        "",
        _table(["id", "claim", "this run", "other run", "changed"], rows),
        "",
        ("Verdicts that change: " + "; ".join(changed) + ".") if changed else "No verdict changes.",
        "",
    ]
    return "\n".join(lines)


def write_report(
    out: Path,
    cfg: RunConfig,
    modules: list[ModuleType],
    claims,
    wall_s: float,
    command: str,
    cpu_s: float | None = None,
) -> Path:
    out = Path(out)
    settings = read_settings(out / "settings.csv")
    parts = [
        *_opening(cfg, settings, wall_s, command, cpu_s),
        _claims_section(claims, out),
        _comparison_section(claims, cfg.compare_with),
        _assumptions(cfg, settings),
        _identification_section(out),
        "## Figures",
        "",
    ]
    for m in modules:
        parts += _figure_section(out, m)
    parts.append(fig_channel_knowledge.section(out))
    parts.append(_optimiser_notes(out))
    parts.append(_certificate_section(out))
    parts.append(_columns_section(out, modules))
    parts += [
        "## Reproduce",
        "",
        "- quick (CI): `multispin reproduce --quick --out reproduce-quick`",
        "- full: `multispin reproduce --out reproduce-full` (all cores; resumes from `OUT/cache/` after an "
        "interruption; a changed configuration or optimiser recomputes)",
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path


def _opening(cfg: RunConfig, settings: dict, wall_s: float, command: str, cpu_s: float | None) -> list[str]:
    """The report's title and first paragraphs: the command, the run's kind, time and code version."""
    kind = "quick run (`--quick`: fewer drops and points; not the paper's statistics)" if cfg.quick else "full run"
    return [
        "# Multi-SPIN reproduction report",
        "",
        f"Command: `{command or 'multispin reproduce'}` — {kind}; wall time {wall_s / 60:.1f} min "
        f"({wall_s:.0f} s) with {cfg.workers} worker(s)"
        + (
            f"; the drops took {cpu_s:.0f} s of CPU in all (≈ {_duration(cpu_s / max(1, cfg.workers))} on "
            f"{cfg.workers} otherwise idle cores)"
            if cpu_s
            else ""
        )
        + f". Model pairs: {', '.join(cfg.presets)}. Code version {settings.get('source_version') or __version__} "
        f"(drop code {settings.get('code_version')}).",
        "",
        "Everything below is generated from the CSVs in this directory. The paper's findings are relative; the "
        "checked-claims table says, claim by claim, what was measured and whether it holds.",
        "",
    ]


def _figure_section(out: Path, m: ModuleType) -> list[str]:
    """One figure's section: its plot, what it shows and how to regenerate it (none where the run
    has no CSV for it)."""
    csv_path = out / f"{m.NAME}.csv"
    if not csv_path.exists():
        return []
    text = m.describe(read_csv(csv_path))
    return [
        f"### {m.TITLE}",
        "",
        f"![{m.NAME}]({m.NAME}.png)",
        "",
        text,
        "",
        f"Data: [`{m.NAME}.csv`]({m.NAME}.csv); regenerate with "
        f"`multispin reproduce --figure {m.NAME.split('_')[0]} --out NEW_FOLDER` (add `--quick` for the quick run).",
        "",
    ]
