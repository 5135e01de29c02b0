"""The published cells as data: provenance, a split fixed by the cell id, and predictions for every load kind."""

from __future__ import annotations

import pytest

from turbogate.perf import get_gpu, get_model
from turbogate.perf.cells import METRICS, published_cells, published_sources, split_of
from turbogate.perf.profiles import ENGINE_PROFILES, get_profile
from turbogate.plan.fidelity import closed_form, engine


def test_at_least_forty_cells_from_five_sources_each_with_its_provenance() -> None:
    cells = published_cells()
    sources = published_sources()
    assert len(cells) >= 40
    assert len({c.source for c in cells}) >= 5
    for key, source in sources.items():
        assert source.url.startswith("https://"), key
        assert source.title and source.date and source.method, key
    for cell in cells:
        assert cell.source in sources, cell.id
        assert cell.engine and cell.engine_version, cell.id
        assert cell.metric in METRICS and cell.value > 0, cell.id
        assert cell.engine_profile in ENGINE_PROFILES, cell.id
        get_gpu(cell.gpu)
        get_model(cell.model)
    assert len({c.id for c in cells}) == len(cells), "ids are unique"


def test_the_split_is_the_hash_of_the_id_so_it_was_fixed_before_fitting() -> None:
    cells = published_cells()
    for cell in cells:
        assert cell.split == split_of(cell.id), cell.id
    fit, holdout = published_cells(split="fit"), published_cells(split="holdout")
    assert len(fit) + len(holdout) == len(cells)
    assert min(len(fit), len(holdout)) >= 0.35 * len(cells), "two halves, not one cell aside"


@pytest.mark.parametrize("kind", ["offline", "rate", "concurrency", "burst"])
def test_every_load_kind_is_predicted_by_both_instruments(kind: str) -> None:
    cell = next(c for c in published_cells() if c.load.kind == kind)
    profile = get_profile(cell.engine_profile)
    cf = closed_form(cell, profile)
    eng = engine(cell, profile, requests_cap=200)
    for p in (cf, eng):
        assert p.predicted > 0
        assert abs(p.error) < 1.0, (cell.id, p.predicted, cell.value)  # the right unit and order of magnitude


def test_an_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(Exception, match="vllm-v1"):
        get_profile("vllm-v9")
