"""The project's words for its concepts, each defined once: links, mode rules, run policies, draft policies, objectives.

Every layer (the token math, the optimiser, the runtime, the command line) imports its names from
here, so that ``ul`` means the same thing in a journal row, a wire message, the optimiser's mask
and a ``--mode`` flag. It imports nothing of the package's layers (only `multispin.errors`), so the
innermost layer may read it and the command line may list its names in its help without loading
numpy or torch.

- **Link modes** (``ul``, ``dl``): how one rejected device is corrected. UL: it uploads its draft
  distribution q and the server samples the correction; DL: the server sends the target
  distribution p and the device samples it.
- **Mode rules** (``optimal``, ``all_ul``, ``all_dl``, ``random``): how the links of one round's
  rejected set are chosen; the optimiser's ``modes=`` argument.
- **Verification rules** (``standard``, ``coupled``): how one device's draft is checked, chosen per
  device *before* it drafts (from the plan and the channel, never from p, q or the drafted tokens).
  ``standard``: speculative sampling (accept x_i with probability min(1, p/q)); a rejected device
  is then corrected over a link mode. ``coupled``: device and server share Gumbel noise per
  absolute position, the device drafts argmax(log q + G), the server commits argmax(log p + G) at
  the first mismatch; nothing is corrected over the air, so a coupled device has no link mode.
- **Run policies** (``adaptive``, ``all_ul``, ``all_dl``, ``random``, ``target_only``,
  ``three_way``, ``all_coupled``): what a testbed or demo run compares; each is a mode rule and a
  verification choice (``target_only`` drafts nothing, so its rule never acts). ``three_way`` is the
  paper's adaptive plus the coupled rule: per device and round the planner chooses coupled or
  standard (then UL or DL for a rejected standard device); ``all_coupled`` verifies every device
  coupled, so nothing is ever corrected over the air. Each is one row of ``POLICY_TABLE`` (with the
  draft-length baselines the model also compares): its label, its rules, which drops compute it,
  its place in a demo and its look in figures; every table keyed by a policy is derived from it.
- **Fixed modes** (``ul``, ``dl``, ``random``): the ``--mode`` of ``generate`` and ``serve``, which
  draft a fixed γ: one link for every rejection, or the fair coin.
- **Draft policies**: how the optimiser chooses the draft lengths γ.
- **Objectives** (``sum``, ``proportional-fair``, ``max-min``, ``energy``): what it maximises.

The fair coin (``random``) is one function, `multispin.system.channel.fair_coin_ul`, keyed in the
one registry of random streams, so ``generate --mode random`` and ``testbed --policy random`` with
the same seed choose the same links for the same rejected devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

from multispin.errors import ConfigError

# ----------------------------------------------------------------------------- links

LinkMode = Literal["ul", "dl"]
UL: LinkMode = "ul"
DL: LinkMode = "dl"
LINK_MODES: tuple[LinkMode, ...] = (UL, DL)


class LinkCode(IntEnum):
    """A device's link as the optimiser's per-device int8 arrays hold it (`ReactiveDecision.mode`,
    vectorised): not corrected, UL, DL. `CODE_LINK` names each code's link."""

    NONE = 0
    UL = 1
    DL = 2


CODE_LINK: dict[int, LinkMode | None] = {LinkCode.NONE: None, LinkCode.UL: UL, LinkCode.DL: DL}

# ----------------------------------------------------------------------------- mode rules

ModeRule = Literal["optimal", "all_ul", "all_dl", "random"]
MODE_RULES: tuple[ModeRule, ...] = ("optimal", "all_ul", "all_dl", "random")
# the links each rule may pick (a run's payload needs the codecs of these links only)
RULE_LINKS: dict[str, tuple[LinkMode, ...]] = {
    "optimal": LINK_MODES,
    "all_ul": (UL,),
    "all_dl": (DL,),
    "random": LINK_MODES,
}
# the fair coin: a rejected device goes UL where its uniform draw is below this
COIN_UL_BELOW = 0.5

# ----------------------------------------------------------------------------- verification rules

VerifyRule = Literal["standard", "coupled"]
STANDARD: VerifyRule = "standard"
COUPLED: VerifyRule = "coupled"
VERIFY_RULES: tuple[VerifyRule, ...] = (STANDARD, COUPLED)
# what a plan may be asked for: one rule for every device, or ``choose`` (per device, with γ)
VERIFY_CHOICES: tuple[str, ...] = (*VERIFY_RULES, "choose")


def verify_rule(name: str) -> VerifyRule:
    """``name`` as one of VERIFY_RULES, or a ConfigError naming the allowed values."""
    if name not in VERIFY_RULES:
        raise ConfigError(f"verify rule: unknown value {name!r} (allowed: {', '.join(VERIFY_RULES)})")
    return name  # type: ignore[return-value]


# ----------------------------------------------------------------------------- run policies

RunPolicy = Literal["adaptive", "all_ul", "all_dl", "random", "target_only", "three_way", "all_coupled"]
REFERENCE = "adaptive"  # the paper's plan: its drop columns carry no suffix, the others' gains are over it
TARGET_ONLY = "target_only"
THREE_WAY = "three_way"
ALL_COUPLED = "all_coupled"

# The groups of a drop's plans (`experiments.reproduce.drop`): the plan itself, the mode baselines
# (each with its own γ), the draft-length baselines (optimal modes) and the coupled plans
DropGroup = Literal["plan", "modes", "drafts", "coupled"]
# what else compares a policy on the model: a drop planned for a non-sum objective, the
# channel-knowledge drop and the capacity drop
DropKind = Literal["objective", "csi", "capacity"]


@dataclass(frozen=True)
class Policy:
    """One policy the project compares: its words, its rules and how figures draw it.

    ``rule`` is the optimiser's mode rule for a rejected standard device, ``verify`` one of
    VERIFY_CHOICES; ``drafts`` False means γ = 0 for every device. ``run``: a run policy (testbed,
    demo); the draft-length baselines compare on the model only. ``group``: which of a drop's plans
    computes it (None: no drop does); ``kinds``: the other drops that compare it. ``demo_rank``: its
    place in a demo (None: not in one), ``lead``: a demo may lead with it. ``look``: colour, marker,
    line style and filled marker in the model's figures; ``run_look``: line style, marker and colour
    in the demo's."""

    name: str
    label: str
    rule: ModeRule = "optimal"
    verify: str = STANDARD
    drafts: bool = True
    run: bool = True
    group: DropGroup | None = None
    kinds: tuple[DropKind, ...] = ()
    demo_rank: int | None = None
    lead: bool = False
    look: tuple[str, str, str, bool] | None = None
    run_look: tuple[str, str | None, str] | None = None

    @property
    def suffix(self) -> str:
        """What a drop column of this policy ends in (``goodput_all_ul``; none for the reference)."""
        return "" if self.name == REFERENCE else f"_{self.name}"

    @property
    def links(self) -> tuple[LinkMode, ...]:
        """The links it may use: none where it never corrects (no drafts, or every device coupled)."""
        return () if not self.drafts or self.verify == COUPLED else RULE_LINKS[self.rule]


# Every policy, once: adding one is a row here plus its implementation, and for a run policy its
# name in RunPolicy above (typing needs it spelt). tests/test_policy_table.py lists every place that
# reads this table and fails where a policy is missing.
POLICY_TABLE: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy(
            REFERENCE,
            "adaptive",
            group="plan",
            kinds=("objective", "csi", "capacity"),
            demo_rank=1,
            lead=True,
            look=("C0", "o", "-", True),
            run_look=("-", "o", "tab:blue"),
        ),
        Policy(
            "all_ul",
            "all-UL",
            "all_ul",
            group="modes",
            kinds=("objective", "csi", "capacity"),
            demo_rank=3,
            look=("C1", "s", "--", False),
            run_look=("--", "s", "tab:orange"),
        ),
        Policy(
            "all_dl",
            "all-DL",
            "all_dl",
            group="modes",
            kinds=("objective", "csi", "capacity"),
            demo_rank=4,
            look=("C2", "^", "-.", False),
            run_look=("-.", "^", "tab:green"),
        ),
        Policy("random", "random", "random", group="modes", kinds=("objective",), look=("C3", "v", ":", False)),
        Policy(TARGET_ONLY, "target-only", drafts=False, demo_rank=5, run_look=(":", None, "black")),
        Policy("best_uniform", "best uniform γ", run=False, group="drafts", look=("C4", "D", "--", False)),
        Policy("computation_only", "computation-only γ", run=False, group="drafts", look=("C5", "s", "-.", False)),
        Policy("greedy_paper", "paper's greedy", run=False, group="drafts", look=("C9", "^", ":", False)),
        Policy(
            THREE_WAY,
            "three-way",
            verify="choose",
            group="coupled",
            demo_rank=0,
            lead=True,
            look=("C6", "*", "-", True),
            run_look=("-", "D", "tab:purple"),
        ),
        Policy(
            ALL_COUPLED,
            "all-coupled",
            verify=COUPLED,
            group="coupled",
            demo_rank=2,
            look=("C7", "x", "--", False),
            run_look=("--", "v", "tab:red"),
        ),
    )
}
# policy -> its mode rule: the run policies (the optimiser's baseline names: all_ul in the CLI, the
# API and every JSON alike)
RUN_POLICIES: dict[str, ModeRule] = {p.name: p.rule for p in POLICY_TABLE.values() if p.run}
# how a plan verifies (`optimize.plan`'s ``verify``, `optimize --verify`): a rule for every device,
# or the planner's choice per device; each run policy's, where it is not standard
POLICY_VERIFY: dict[str, str] = {p.name: p.verify for p in POLICY_TABLE.values() if p.run and p.verify != STANDARD}


def policy_verify(policy: str) -> str:
    """How ``policy`` verifies: one of VERIFY_CHOICES."""
    return POLICY_TABLE[policy].verify if policy in POLICY_TABLE else STANDARD


def _demo_order() -> tuple[Policy, ...]:
    return tuple(sorted((p for p in POLICY_TABLE.values() if p.demo_rank is not None), key=lambda p: p.demo_rank or 0))


# the policies a demo compares, its lead first: the three-way choice, the paper's adaptive (UL or
# DL), every device coupled, the two one-link baselines and plain decoding
DEMO_POLICIES: tuple[str, ...] = tuple(p.name for p in _demo_order())
# the policies a comparison may lead with (the others are its baselines)
LEAD_POLICIES: tuple[str, ...] = tuple(p.name for p in _demo_order() if p.lead)


def policy_links(policy: str) -> tuple[LinkMode, ...]:
    """The links a run policy may use (none for ``target_only`` and ``all_coupled``: they never correct)."""
    return POLICY_TABLE[policy].links


def policy_name(name: str) -> str:
    """``name`` as a policy of RUN_POLICIES, or a ConfigError naming the allowed values."""
    if name not in RUN_POLICIES:
        raise ConfigError(f"policy: unknown value {name!r} (allowed: {', '.join(RUN_POLICIES)})")
    return name


def policies_in(group: DropGroup | None = None, kind: DropKind | None = None) -> tuple[Policy, ...]:
    """The policies a drop computes (``group``: of that group; ``kind``: compared by that drop), in
    POLICY_TABLE's order; with neither, every policy some drop computes."""
    return tuple(
        p
        for p in POLICY_TABLE.values()
        if p.group is not None and (group is None or p.group == group) and (kind is None or kind in p.kinds)
    )


# ----------------------------------------------------------------------------- fixed modes (--mode)

# ``coupled``: every device under the coupled verification rule (no link is ever used)
FixedMode = Literal["ul", "dl", "random", "coupled"]
FIXED_MODES: tuple[str, ...] = (UL, DL, "random", COUPLED)


def fixed_mode(name: str) -> str:
    """``name`` as one of FIXED_MODES, or a ConfigError naming the allowed values."""
    if name not in FIXED_MODES:
        raise ConfigError(f"mode: unknown value {name!r} (allowed: {', '.join(FIXED_MODES)})")
    return name


def fixed_mode_links(mode: str) -> tuple[LinkMode, ...]:
    """The links a ``--mode`` may use."""
    canon = fixed_mode(mode)
    if canon == COUPLED:
        return ()
    return LINK_MODES if canon == "random" else (canon,)  # type: ignore[return-value]


# ----------------------------------------------------------------------------- draft policies

# how the optimiser chooses γ (optimize.baselines); ``fast`` is the runtime planner's search
DRAFT_POLICIES: tuple[str, ...] = ("greedy", "greedy_paper", "best_uniform", "computation_only", "oracle", "certified")
PLAN_POLICIES: tuple[str, ...] = DRAFT_POLICIES + ("fast",)

# ----------------------------------------------------------------------------- objectives

# what the optimiser maximises over a round's devices (optimize.objectives): the sum of their
# goodputs (the paper's), proportional fairness, the worst device's, or goodput per energy
Objective = Literal["sum", "proportional-fair", "max-min", "energy"]
OBJECTIVES: tuple[Objective, ...] = ("sum", "proportional-fair", "max-min", "energy")
