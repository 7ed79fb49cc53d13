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
  coupled, so nothing is ever corrected over the air.
- **Fixed modes** (``ul``, ``dl``, ``random``): the ``--mode`` of ``generate`` and ``serve``, which
  draft a fixed γ: one link for every rejection, or the fair coin.
- **Draft policies**: how the optimiser chooses the draft lengths γ.
- **Objectives** (``sum``, ``proportional-fair``, ``max-min``, ``energy``): what it maximises.

The fair coin (``random``) is one function, `multispin.system.channel.fair_coin_ul`, keyed in the
one registry of random streams, so ``generate --mode random`` and ``testbed --policy random`` with
the same seed choose the same links for the same rejected devices.
"""

from __future__ import annotations

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
TARGET_ONLY = "target_only"
THREE_WAY = "three_way"
ALL_COUPLED = "all_coupled"
# policy -> its mode rule; the names are the optimiser's baseline names (all_ul in the CLI, the
# API and every JSON alike)
RUN_POLICIES: dict[str, ModeRule] = {
    "adaptive": "optimal",
    "all_ul": "all_ul",
    "all_dl": "all_dl",
    "random": "random",
    TARGET_ONLY: "optimal",
    THREE_WAY: "optimal",
    ALL_COUPLED: "optimal",
}
# how a plan verifies (`optimize.plan`'s ``verify``, `optimize --verify`): a rule for every device,
# or the planner's choice per device; each run policy's, where it is not standard
VERIFY_CHOICES: tuple[str, ...] = (*VERIFY_RULES, "choose")
POLICY_VERIFY: dict[str, str] = {THREE_WAY: "choose", ALL_COUPLED: "coupled"}


def policy_verify(policy: str) -> str:
    """How ``policy`` verifies: one of VERIFY_CHOICES."""
    return POLICY_VERIFY.get(policy, "standard")


# the policies a demo compares, its lead first: the three-way choice, the paper's adaptive (UL or
# DL), every device coupled, the two one-link baselines and plain decoding
DEMO_POLICIES: tuple[str, ...] = (THREE_WAY, "adaptive", ALL_COUPLED, "all_ul", "all_dl", TARGET_ONLY)
# the policies a comparison may lead with (the others are its baselines)
LEAD_POLICIES: tuple[str, ...] = (THREE_WAY, "adaptive")


def policy_links(policy: str) -> tuple[LinkMode, ...]:
    """The links a run policy may use (none for ``target_only``: it never corrects)."""
    return () if policy in (TARGET_ONLY, ALL_COUPLED) else RULE_LINKS[RUN_POLICIES[policy]]


def policy_name(name: str) -> str:
    """``name`` as a policy of RUN_POLICIES, or a ConfigError naming the allowed values."""
    if name not in RUN_POLICIES:
        raise ConfigError(f"policy: unknown value {name!r} (allowed: {', '.join(RUN_POLICIES)})")
    return name


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
