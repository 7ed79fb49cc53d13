"""Groups of flags that several verbs take together, each written once.

A verb names a group by one parameter, ``radio: dict = RADIO.slot``, under ``@takes(RADIO)``;
``takes`` puts the group's flags into the verb's signature where that parameter stands (Typer
reads the signature, so ``--help`` lists them in place) and hands the verb one dict of their
values, keyed as the scenario and the configs name them (``p_dl_dbm``, not ``pdl_dbm``), so a
verb passes them on with ``**radio``. A group may also act before the verb runs (``MACHINE`` sets
up logging and torch's threads), so that the same flag does the same thing in every verb.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import typer

from multispin.commands._options import (
    CODECS,
    LogLevel,
    TorchDevice,
    choice_option,
    csi_planning_option,
    log_level_option,
    noise_figure_option,
    pdl_option,
    pilot_snr_option,
    pul_option,
    set_threads,
    setup_logging,
    speed_option,
    threads_option,
    torch_device_option,
)
from multispin.vocabulary import FIXED_MODES, OBJECTIVES


@dataclass(frozen=True)
class FlagGroup:
    name: str
    flags: tuple[inspect.Parameter, ...]
    before: Optional[Callable[[dict], None]] = None  # runs on the values before the verb does

    @property
    def slot(self) -> None:
        """The default of the verb's parameter that receives the group (replaced by ``takes``)."""
        return None


def group(name: str, before: Optional[Callable[[dict], None]] = None, **flags: tuple[Any, Any]) -> FlagGroup:
    """A group of ``flags``: name -> (annotation, typer.Option(...))."""
    params = tuple(
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=o) for n, (a, o) in flags.items()
    )
    return FlagGroup(name, params, before)


def takes(*groups: FlagGroup):
    """Decorate a verb whose parameters named after ``groups`` each receive that group's values."""

    def decorate(verb: Callable) -> Callable:
        sig = inspect.signature(verb, eval_str=True)
        by_name = {g.name: g for g in groups}
        missing = set(by_name) - set(sig.parameters)
        if missing:
            raise TypeError(f"{verb.__name__}: no parameter for flag group(s) {sorted(missing)}")
        params = []
        for p in sig.parameters.values():
            g = by_name.get(p.name)
            params.extend(g.flags if g else [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)])

        @functools.wraps(verb)
        def run(**values: Any):
            for g in groups:
                values[g.name] = {f.name: values.pop(f.name) for f in g.flags}
                if g.before:
                    g.before(values[g.name])
            return verb(**values)

        run.__signature__ = sig.replace(parameters=params)
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return run

    return decorate


# --scenario's radio fields, wherever a scenario is built (optimize, sweep, testbed, demo)
RADIO = group(
    "radio",
    p_dl_dbm=(Optional[float], pdl_option()),
    p_ul_dbm=(Optional[float], pul_option()),
    noise_figure_db=(Optional[float], noise_figure_option()),
)

# what the planner knows of the channel (testbed, demo)
CSI = group(
    "csi",
    speed_kmh=(Optional[float], speed_option()),
    pilot_snr_db=(Optional[float], pilot_snr_option()),
    csi_planning=(Optional[str], csi_planning_option()),
)

_CODEC_HELP = (
    "codec of {what} (dense-fp32, dense-fp16, dense-bf16, sparse:v_eff=N,q=16|32, lattice:l=N); "
    "default: sparse:v_eff=1024,q=32, exact with the default top-k"
)
_TOP_K_HELP = "top-k sampling cut (0 = off); default: 1024 (= V_eff, so both modes are exact)"

# what the planner maximises (optimize, testbed, demo; docs/service.md)
OBJECTIVE = group(
    "objective",
    objective=(
        Optional[str],
        choice_option(
            None,
            OBJECTIVES,
            "--objective",
            show_default="the scenario's; sum",
            help="what the plan maximises: sum goodput (the paper's), "
            "proportional-fair (Σ log G_k), max-min (worst device) or "
            "energy (sum goodput less w × device power)",
        ),
    ),
    energy_weight=(
        Optional[float],
        typer.Option(
            None,
            "--energy-weight",
            min=0.0,
            metavar="TOKENS/J",
            show_default="the scenario's; 1",
            help="w of --objective energy: tokens one joule of device energy is worth",
        ),
    ),
)

# sampling cut and codecs that the testbed picks by itself unless told (testbed, demo)
LINK = group(
    "link",
    top_k=(Optional[int], typer.Option(None, "--top-k", min=0, metavar="INT", help=_TOP_K_HELP)),
    ul_codec=(
        Optional[str],
        typer.Option(None, "--ul-codec", metavar="CODEC", help=_CODEC_HELP.format(what="q_j in UL mode")),
    ),
    dl_codec=(
        Optional[str],
        typer.Option(None, "--dl-codec", metavar="CODEC", help=_CODEC_HELP.format(what="p_j in DL mode")),
    ),
)

# one round's settings, the same on every device (generate, serve)
ROUND = group(
    "round_settings",
    draft_len=(
        int,
        typer.Option(4, min=0, max=20, metavar="INT", help="draft length γ for every device, 0..20 (0 = target only)"),
    ),
    mode=(
        str,
        choice_option(
            "random",
            FIXED_MODES,
            "--mode",
            help="correction mode of rejected devices (random: a fair coin per rejection; coupled: shared noise, nothing corrected)",
        ),
    ),
    temperature=(float, typer.Option(1.0, min=0.0, metavar="FLOAT", help="sampling temperature (0 = greedy)")),
    top_k=(int, typer.Option(0, min=0, metavar="INT", help="top-k cut (0 = off)")),
    top_p=(float, typer.Option(1.0, metavar="FLOAT", help="nucleus mass in (0, 1] (1 = off)")),
    seed=(int, typer.Option(0, metavar="INT", help="seed of every random draw")),
    ul_codec=(str, typer.Option("dense-fp32", metavar="CODEC", help=f"codec of q_j in UL mode ({CODECS})")),
    dl_codec=(str, typer.Option("dense-fp32", metavar="CODEC", help=f"codec of p_j in DL mode ({CODECS})")),
)


def _set_up_machine(values: dict) -> None:
    setup_logging(values["log_level"])
    set_threads(values["threads"])


# where and how the models run, and what is logged (measure, profile, serve)
MACHINE = group(
    "machine",
    before=_set_up_machine,
    threads=(Optional[int], threads_option()),
    placement=(TorchDevice, torch_device_option()),
    log_level=(LogLevel, log_level_option()),
)
