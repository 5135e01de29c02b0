"""Run folders: request records plain or gzip-compressed, read the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.results.helpers import saturating_run
from turbogate.results import REQUESTS, RequestRecord, Summary, load_run, summarize, write_run
from turbogate.results.io import REQUESTS_GZ, read_jsonl, write_jsonl


def _run() -> tuple[list[RequestRecord], Summary]:
    records, steps, _ = saturating_run()
    return records, summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={})


def test_compressed_records_read_back_equal_and_a_rewrite_keeps_one_version(tmp_path: Path) -> None:
    records, summary = _run()
    write_run(tmp_path / "run", records, (), summary, report=False)
    plain = load_run(tmp_path / "run")
    write_run(tmp_path / "run", records, (), summary, report=False, records_file=REQUESTS_GZ)
    assert (tmp_path / "run" / REQUESTS_GZ).is_file() and not (tmp_path / "run" / REQUESTS).exists()
    assert (tmp_path / "run" / REQUESTS_GZ).read_bytes()[:2] == b"\x1f\x8b"  # gzip's magic
    packed = load_run(tmp_path / "run")
    assert packed.requests == plain.requests and len(packed.requests) == len(records)
    # The plain name finds the compressed file too, for readers that open requests.jsonl directly.
    assert len(list(read_jsonl(tmp_path / "run" / REQUESTS))) == len(records)


def test_a_folder_without_records_says_where_they_are(tmp_path: Path) -> None:
    records, summary = _run()
    write_run(tmp_path / "run", records, (), summary, report=False, records_file=None)
    assert load_run(tmp_path / "run", with_requests=False).summary.kind == summary.kind
    with pytest.raises(FileNotFoundError, match="only its summary"):
        load_run(tmp_path / "run")
    with pytest.raises(ValueError, match="records_file"):
        write_run(tmp_path / "run", records, (), summary, report=False, records_file="x.csv")


def test_jsonl_round_trip_through_gzip(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [{"i": i, "x": i / 3} for i in range(1000)]
    write_jsonl(tmp_path / "a.jsonl.gz", rows)
    assert list(read_jsonl(tmp_path / "a.jsonl.gz")) == rows
    assert not list(tmp_path.glob("*.tmp"))
