"""Screenshots of the built documentation site, opened from file:// in headless Chromium, to look
at (pictures, maths, code blocks and links as a reader sees them).

    python tools/docs_screenshots.py [SITE_DIR] [OUT_DIR]      # defaults: build/site, build/screenshots

Needs `chromium` (or chromium-browser / google-chrome) on the PATH and a site built with
`make docs`. Writes one PNG per page (home, API, system model and two example pages).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PAGES = (
    "index",
    "api",
    "system-model",
    "architecture",
    "examples/sweep",
    "examples/demo",
    "examples/optimize",
    "examples/generate",
    "examples/scenarios",
)
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def main(site: Path, out: Path) -> int:
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        print(f"no headless browser found (tried {', '.join(BROWSERS)})", file=sys.stderr)
        return 2
    if not (site / "index.html").exists():
        print(f"{site}/index.html: no site there; run `make docs` first", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="docs-shots-")  # a fresh, empty browser profile
    for page in PAGES:
        png = out / f"{page.replace('/', '_')}.png"
        # the virtual-time budget lets MathJax typeset before the shot is taken
        # no background networking: this machine's closed network refuses it, slowly
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--window-size=1280,1600",
                f"--screenshot={png}",
                (site / f"{page}.html").resolve().as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        print(png)
    return 0


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:3]]
    sys.exit(main(args[0] if args else Path("build/site"), args[1] if len(args) > 1 else Path("build/screenshots")))
