"""The documentation's search box, typed into in headless Chromium with the site opened from
file:// (no server, no network): prints how many pages match and the first few.

    python tools/docs_search_check.py [SITE_DIR] [QUERY]      # defaults: build/site, coupled

Needs a site built with `make docs`, Debian's `chromium` and `chromium-driver` (/usr/bin/chromium,
/usr/bin/chromedriver) and the `selenium` package (not a project dependency: a one-off check of
what tests/test_docs.py checks statically, that every asset the search needs is in the site).
Exit 1 when the search shows no result.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
    "--disable-component-update --disable-sync --window-size=1400,1000"
)


def main(site: Path, query: str) -> int:
    from selenium import webdriver
    from selenium.common.exceptions import ElementNotInteractableException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = Options()
    for flag in FLAGS.split():
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        browser.get((site / "index.html").resolve().as_uri())
        time.sleep(2)  # the search index loads in the shim's iframe
        box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
        try:
            box.click()
        except ElementNotInteractableException:  # the theme hides the box when its worker fails
            print("the search box is hidden: the search worker did not start")
            return 1
        box.send_keys(query)
        time.sleep(3)
        meta = browser.find_element(By.CSS_SELECTOR, ".md-search-result__meta").get_attribute("textContent")
        hits = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item > a")]
    finally:
        browser.quit()
    print(f"{query!r}: {(meta or '').strip()}")
    for href in hits[:5]:
        print(f"  {href}")
    return 0 if hits else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(Path(args[0] if args else "build/site"), args[1] if len(args) > 1 else "coupled"))
