"""The sample explorer: filtered pages, one sample with its token arrays, field histograms."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path, Query

from rlcockpit.server.deps import Samples
from rlcockpit.server.query import I64_MAX, I64_MIN, check_range, csv
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import read_router
from rlcockpit.server.serialize import sample_dict
from rlcockpit.store.base import SAMPLE_HISTOGRAM_FIELDS, SampleQuery

router = read_router("/api/runs/{run}", "samples")

Order = Literal["step_asc", "step_desc", "reward_asc", "reward_desc"]
Field = Literal[SAMPLE_HISTOGRAM_FIELDS]  # type: ignore[valid-type]
MAX_PAGE = 1000


@router.get("/samples", summary="A filtered, stably ordered page of samples")
def samples(
    run: str, reader: Samples,
    step_min: Annotated[int | None, Query(ge=I64_MIN, le=I64_MAX, description="first step (inclusive)")
                        ] = None,
    step_max: Annotated[int | None, Query(ge=I64_MIN, le=I64_MAX, description="last step (inclusive)")
                        ] = None,
    category: Annotated[str | None, Query(description="prompt category, e.g. math")] = None,
    reward_min: Annotated[float | None, Query(description="smallest reward (inclusive)")] = None,
    reward_max: Annotated[float | None, Query(description="largest reward (inclusive)")] = None,
    flags: Annotated[str | None, Query(description="comma-separated flags; every one must be "
                                                   "present")] = None,
    prompt_id: Annotated[str | None, Query(description="one prompt's samples")] = None,
    text: Annotated[str | None, Query(description="case-insensitive substring of prompt or "
                                                  "response (a scan: slower)")] = None,
    has_token_arrays: Annotated[bool | None, Query(description="only samples with (true) or "
                                                               "without (false) token arrays")
                                ] = None,
    order: Annotated[Order, Query(description="sort order; ties by (step, sample_id)")
                     ] = "step_desc",
    limit: Annotated[int, Query(ge=0, le=MAX_PAGE, description="page size")] = 50,
    offset: Annotated[int, Query(ge=0, le=I64_MAX, description="samples to skip")] = 0,
    token_arrays: Annotated[bool, Query(description="include per-token arrays in the page")
                            ] = False,
) -> SafeJSONResponse:
    check_range("step_min", step_min, "step_max", step_max)
    check_range("reward_min", reward_min, "reward_max", reward_max)
    query = SampleQuery(step_min=step_min, step_max=step_max, category=category or None,
                        reward_min=reward_min, reward_max=reward_max, flags=tuple(csv(flags)),
                        prompt_id=prompt_id, text=text or None, has_token_arrays=has_token_arrays,
                        order=order, limit=limit, offset=offset,
                        include_token_arrays=token_arrays)
    page = reader.query_samples(run, query)
    flags_of = page.has_token_arrays or (None,) * len(page.items)
    items = [sample_dict(s, token_arrays=token_arrays, has_arrays=has)
             for s, has in zip(page.items, flags_of, strict=True)]
    return json_response({"items": items, "total": page.total, "offset": page.offset, "limit": page.limit})


@router.get("/samples/{step}/{sample_id}", summary="One sample with its per-token arrays "
                                                  "(tokens, logprobs, ref_logprobs, token_kl)")
def sample(run: str, step: Annotated[int, Path(ge=I64_MIN, le=I64_MAX)],
           sample_id: Annotated[int, Path(ge=I64_MIN, le=I64_MAX)], reader: Samples) -> SafeJSONResponse:
    return json_response(sample_dict(reader.get_sample(run, step, sample_id), token_arrays=True))


@router.get("/sample_histogram", summary="Histogram of one numeric sample field over a step "
                                         "range, computed by the store")
def sample_histogram(
    run: str, reader: Samples,
    field: Annotated[Field, Query(description="sample field to bin")] = "reward",
    bins: Annotated[int, Query(ge=1, le=1000, description="number of bins")] = 50,
    step_min: Annotated[int | None, Query(ge=I64_MIN, le=I64_MAX)] = None,
    step_max: Annotated[int | None, Query(ge=I64_MIN, le=I64_MAX)] = None,
) -> SafeJSONResponse:
    check_range("step_min", step_min, "step_max", step_max)
    h = reader.sample_histogram(run, field, bins, step_min=step_min, step_max=step_max)
    return json_response({"field": h.field, "edges": list(h.edges), "counts": list(h.counts),
                          "total": h.total, "finite": h.finite, "step_min": h.step_min,
                          "step_max": h.step_max})
