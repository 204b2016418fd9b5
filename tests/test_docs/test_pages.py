"""README and docs/: a landing page within its size, links that resolve,
no pointer to files a user does not have."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / 'README.md'] + sorted((REPO / 'docs').rglob('*.md'))
LINK = re.compile(r'\]\(([^)#\s]+)(?:#[^)]*)?\)')


def test_readme_is_at_most_12_kib():
    assert (REPO / 'README.md').stat().st_size <= 12 * 1024


@pytest.mark.parametrize('page', PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    text = page.read_text()
    missing = [
        target for target in LINK.findall(text)
        if '://' not in target and not (page.parent / target).exists()
    ]
    assert missing == []
    # working notes of the developers, not shipped
    assert 'SPEC.md' not in text and 'BASELINES.md' not in text


def test_every_picture_in_docs_images_is_shown():
    shown = ' '.join(page.read_text() for page in PAGES)
    unshown = [
        p.name for p in (REPO / 'docs' / 'images').iterdir()
        if p.name not in shown
    ]
    assert unshown == []
