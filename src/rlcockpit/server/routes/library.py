"""The failure library: natural-language search (中文 or English) and one full entry.

``rlcockpit.diagnostics.library`` is imported on first use, so the server starts without it; a
server whose installation lacks the library answers 503 ``library_unavailable``.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from fastapi import Query

from rlcockpit.server.errors import LibraryUnavailable
from rlcockpit.server.library_sources import public_sources
from rlcockpit.server.responses import SafeJSONResponse, json_response, json_safe
from rlcockpit.server.routes.base import read_router

router = read_router("/api/library", "library", 503)


@router.get("/search", summary="Search the failure library in Chinese or English")
def search(q: Annotated[str, Query(min_length=1, description="symptom, e.g. 'KL keeps growing' "
                                                            "or 'KL 持续上升'")],
           k: Annotated[int, Query(ge=1, le=50, description="hits at most")] = 5
           ) -> SafeJSONResponse:
    hits = _library().search(q, k)
    return json_response({"items": [{**pattern_dict(h.pattern), "score": float(h.score),
                                     "lang": h.lang} for h in hits]})


@router.get("/{pattern_id}", summary="One failure pattern (both languages)")
def entry(pattern_id: str) -> SafeJSONResponse:
    return json_response(pattern_dict(_library().get(pattern_id)))  # NotFoundError -> 404


def pattern_dict(pattern: Any) -> dict[str, Any]:
    """Every field in both languages (``title: {en, zh}``...) plus ``title_en`` / ``title_zh`` and
    the public sources a user can open (papers, framework docs) beside the seed cases."""
    out = pattern.to_dict()
    return json_safe({**out, "title_en": out["title"]["en"], "title_zh": out["title"]["zh"],
                      "public_sources": public_sources(out["id"])})


@functools.cache
def _library() -> Any:
    try:
        from rlcockpit.diagnostics.library import load_library
    except ImportError as exc:
        raise LibraryUnavailable("the failure library is not part of this installation "
                                 f"({exc}); search is unavailable",
                                 details={"module": "rlcockpit.diagnostics.library"}) from exc
    return load_library()
