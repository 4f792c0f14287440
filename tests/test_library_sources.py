"""Every failure-library pattern cites public sources a user can open (issue 16), served with the
entry beside its seed cases."""

from __future__ import annotations

from urllib.parse import urlparse

from rlcockpit.diagnostics.library import load_library
from rlcockpit.server.library_sources import BY_PATTERN, SOURCES, public_sources

HOSTS = {"arxiv.org", "huggingface.co", "iclr-blog-track.github.io", "joschu.net", "cs231n.github.io", "pytorch.org"}


def test_every_pattern_has_public_sources_with_plain_links():
    ids = set(load_library().ids())
    assert ids == set(BY_PATTERN), f"no sources: {ids - set(BY_PATTERN)}; unknown: {set(BY_PATTERN) - ids}"
    for pattern_id in ids:
        found = public_sources(pattern_id)
        assert found and all(s["title"] for s in found), pattern_id
    for title, url in SOURCES.values():
        parsed = urlparse(url)
        assert parsed.scheme in ("https", "http") and parsed.netloc in HOSTS and title, url
    assert set(SOURCES) == {k for keys in BY_PATTERN.values() for k in keys}  # none unused


def test_library_entry_answer_carries_the_sources():
    from rlcockpit.server.routes.library import pattern_dict

    entry = pattern_dict(load_library().get("kl_explosion"))
    assert entry["seed"] and entry["public_sources"][0]["url"].startswith("https://arxiv.org/")
