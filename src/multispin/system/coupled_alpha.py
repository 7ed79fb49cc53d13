"""Where a scenario's coupled acceptance α_c comes from, and the label every output carries.

No scenario preset carries a measured coupled α: the paper's presets have assumed per-task α
and no pair for them was measured. So unless the scenario gives each device's coupled α itself
(``devices.acceptance_coupled``, `MEASURED_COUPLED`), the coupled α of a device is its α times the
coupled/standard ratio measured teacher-forced on smollm2-135m with its default draft q5g64
(T = 1, top-k 1024, `multispin measure`, the ``coupled`` block of the shipped HumanEval and ShareGPT
profiles; docs/acceptance.md): the code ratio for code tasks (HumanEval), the chat ratio for every
other task. This is an **assumption** (another pair's ratio
on assumed α), and every output that uses it says so with `ASSUMPTION`.
"""

from __future__ import annotations

import numpy as np

# coupled α / standard α of smollm2-135m q5g64, T = 1, top-k 1024, teacher-forced, to 3 digits (the
# shipped profiles' ``coupled.ratio``; tests/experiments/test_coupled_profiles.py keeps them equal)
COUPLED_RATIO = {"code": 0.978, "chat": 0.955}
CODE_TASKS = frozenset({"humaneval", "code"})

ASSUMPTION = (
    "ASSUMED coupled α: each device's α × the coupled/standard ratio measured on smollm2-135m q5g64 "
    f"(T = 1, top-k 1024, teacher-forced): {COUPLED_RATIO['code']} for code tasks (HumanEval), "
    f"{COUPLED_RATIO['chat']} for the others (the scenario gives no devices.acceptance_coupled)"
)


# what an output says instead where the scenario gives each device's coupled α itself
MEASURED_COUPLED = "measured: the scenario's devices.acceptance_coupled"


def task_ratio(task: str) -> float:
    """The assumed coupled/standard ratio of one task (code or chat)."""
    return COUPLED_RATIO["code" if task in CODE_TASKS else "chat"]


def assumed_coupled_alpha(tasks, alpha) -> np.ndarray:
    """α_c per device: α × `task_ratio` of its task (the module's assumption)."""
    a = np.asarray(alpha, dtype=float)
    ratio = np.array([task_ratio(t) for t in tasks], dtype=float)
    return a * (ratio if a.ndim == 1 else ratio[:, None])
