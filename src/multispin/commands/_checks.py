"""Checks a verb runs before it waits for anyone or starts rounds (paths, models once loaded)."""

from __future__ import annotations

from pathlib import Path

from multispin.errors import ConfigError


def check_parent_exists(path: Path, flag: str) -> None:
    """A file the user names goes into a folder that exists: a typo in the folder would otherwise
    silently create a tree (and a journal nobody finds again)."""
    parent = Path(path).parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise ConfigError(f"{flag}: the folder {parent} {what}; create it first or choose another path")


def check_codecs_fit(ul_codec: str, dl_codec: str, vocab_size: int) -> None:
    """A codec that cannot carry a row of this vocabulary (``sparse:v_eff`` > V) is a user
    mistake: stop with one line instead of warning and then waiting for devices.

    Under greedy sampling every usable codec is exact in both modes (UL always; DL because a
    one-hot row survives any codec), so a codec that is not exact for greedy is unusable here;
    the verdict's reason names the field."""
    from multispin.speculative.codecs import make_codec
    from multispin.speculative.warp import SamplingParams

    greedy = SamplingParams.make(temperature=0.0)
    for flag, mode, spec in (("ul_codec", "ul", ul_codec), ("dl_codec", "dl", dl_codec)):
        verdict = make_codec(spec).exactness(mode, greedy, vocab_size)
        if not verdict.exact:
            raise ConfigError(f"{flag}: {verdict.reason}")


FORCE_HELP = "write into an --out folder that holds a previous run's results, replacing them"


def check_out_free(out: Path, force: bool, verb: str, holds: tuple[str, ...]) -> None:
    """A folder that holds a previous run's results (any of ``holds``) is never written over
    silently: one line naming --out and --force instead (a rerun must not lose an 8-minute result)."""
    found = next((name for name in holds if (Path(out) / name).exists()), None)
    if found is not None and not force:
        raise ConfigError(
            f"--out: {out} holds a previous `multispin {verb}` run ({found}); give another "
            "--out, or --force to replace it"
        )


def check_reproduce_out(out: Path, force: bool, config: dict) -> None:
    """``reproduce`` resumes in its --out (the same command continues an interrupted run, from the
    cache) but does not replace a finished run made with other settings without --force."""
    from multispin.datafile import read_json_object

    try:  # a run.json that is not a JSON object (a ConfigError, a ValueError) is no run
        before = read_json_object(Path(out) / "run.json").get("config", {})
    except (OSError, ValueError):
        return
    keys = ("quick", "preset", "seed", "drops", "n_saa", "noise_figure_db", "figures")
    changed = [k for k in keys if k in before and before[k] != config.get(k)]
    if changed and not force:
        was = ", ".join(f"{k} {before[k]}" for k in changed)
        raise ConfigError(
            f"--out: {out} holds a finished `multispin reproduce` run with other settings ({was}); "
            "give another --out, or --force to replace it (the same settings resume)"
        )


def check_credentials(insecure: bool, keys: object, secret: object, keys_hint: str) -> None:
    """A device (or a pool) is either encrypted with its keys or a plaintext debugging run with a
    shared secret, never a mix; ``keys_hint`` says what --keys should name."""
    if insecure and keys is not None:
        raise ConfigError("--insecure: plaintext has no keys; drop --keys or --insecure")
    if not insecure and secret:
        raise ConfigError("--secret: only with --insecure (encrypted runs authenticate devices by key)")
    if not insecure and keys is None:
        raise ConfigError(f"--keys: give {keys_hint}, or --insecure for a plaintext debugging run")
