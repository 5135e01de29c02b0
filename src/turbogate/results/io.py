"""Read and write run folders (the only I/O in ``turbogate.results`` besides the report)."""

from __future__ import annotations

import csv
import gzip
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from turbogate.results.schema import RequestRecord, Sample
from turbogate.results.summary import Summary, csv_rows

REQUESTS = "requests.jsonl"
REQUESTS_GZ = "requests.jsonl.gz"  # the same records, gzip-compressed (sim's default: a sweep's are hundreds of MB)
SAMPLES = "samples.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
REPORT = "report.html"


#: zlib level of compressed records: 8.6× smaller than the JSON lines of simulated requests, where
#: level 1 gives 7.2× and 9 gains under 1 % more for twice the time.
GZIP_LEVEL = 6


def write_jsonl(path: Path, rows: Iterable[dict[str, object]]) -> None:
    """One JSON object per line; gzip-compressed when ``path`` ends in ``.gz``."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as raw, (gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL, mtime=0)
                                 if path.suffix == ".gz" else raw) as f:
        for row in rows:
            f.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY))
            f.write(b"\n")
    tmp.replace(path)


def read_jsonl(path: Path) -> Iterator[dict[str, object]]:
    """The objects of a JSON-lines file, read through gzip when it is ``<path>.gz`` or named ``*.gz``."""
    if not path.is_file() and path.suffix != ".gz" and path.with_name(path.name + ".gz").is_file():
        path = path.with_name(path.name + ".gz")
    with path.open("rb") as raw, (gzip.GzipFile(fileobj=raw, mode="rb") if path.suffix == ".gz" else raw) as f:
        for line in f:
            if line.strip():
                row = orjson.loads(line)
                if isinstance(row, dict):
                    yield row


def requests_file(run_dir: Path) -> Path | None:
    """The run folder's request records, plain or compressed; None when it keeps none."""
    for name in (REQUESTS, REQUESTS_GZ):
        if (run_dir / name).is_file():
            return run_dir / name
    return None


def write_summary(run_dir: Path, summary: Summary) -> None:
    (run_dir / SUMMARY_JSON).write_bytes(orjson.dumps(summary.to_dict(), option=orjson.OPT_INDENT_2))
    header, rows = csv_rows(summary)
    with (run_dir / SUMMARY_CSV).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(["" if v is None else v for v in row] for row in rows)


def write_run(run_dir: Path | str, records: Iterable[RequestRecord], samples: Iterable[Sample],
              summary: Summary, *, report: bool = True, records_file: str | None = REQUESTS) -> Path:
    """Write a complete run folder; ``report`` also renders ``report.html``.

    ``records_file``: :data:`REQUESTS` (plain), :data:`REQUESTS_GZ` (compressed), or None to keep
    only the summary (a sweep point's folder, whose records the combined run already holds)."""
    if records_file not in (REQUESTS, REQUESTS_GZ, None):
        raise ValueError(f"records_file must be {REQUESTS!r}, {REQUESTS_GZ!r} or None, got {records_file!r}")
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    recs = list(records)
    smps = list(samples)
    for stale in {REQUESTS, REQUESTS_GZ} - {records_file}:  # a rewritten folder keeps one version of its records
        (out / stale).unlink(missing_ok=True)
    if records_file is not None:
        write_jsonl(out / records_file, (r.to_dict() for r in recs))
    write_jsonl(out / SAMPLES, (s.to_dict() for s in smps))
    write_summary(out, summary)
    if report:
        from turbogate.results.report import render_report

        (out / REPORT).write_text(render_report(summary, recs, smps), encoding="utf-8")
    return out


@dataclass(frozen=True, slots=True)
class Run:
    """A loaded run folder.  ``summary`` holds the per-step per-tier curves and the knees."""

    path: Path
    summary: Summary
    requests: list[RequestRecord]
    samples: list[Sample]

    @property
    def kind(self) -> str:
        return self.summary.kind


def load_run(run_dir: Path | str, *, with_requests: bool = True, with_samples: bool = True) -> Run:
    """Load a run folder written by ``turbogate bench`` or ``turbogate sim`` (records plain or gzip-compressed)."""
    path = Path(run_dir)
    summary_path = path / SUMMARY_JSON
    if not summary_path.is_file():
        raise FileNotFoundError(f"{path} is not a run folder: {SUMMARY_JSON} is missing")
    raw = orjson.loads(summary_path.read_bytes())
    if not isinstance(raw, dict):
        raise ValueError(f"{summary_path}: expected a JSON object")
    summary = Summary.from_dict(raw)
    reqs: list[RequestRecord] = []
    if with_requests:
        records = requests_file(path)
        if records is None:
            raise FileNotFoundError(f"{path} keeps no request records ({REQUESTS} or {REQUESTS_GZ}), only its summary; "
                                    "a sim sweep point's records are in the combined run folder above it "
                                    "(or rerun with --full-records)")
        reqs = [RequestRecord.from_dict(d) for d in read_jsonl(records)]
    smps: list[Sample] = []
    if with_samples and (path / SAMPLES).is_file():
        smps = [Sample.from_dict(d) for d in read_jsonl(path / SAMPLES)]
    return Run(path=path, summary=summary, requests=reqs, samples=smps)
