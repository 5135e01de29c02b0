"""Read and write run folders (the only I/O in ``turbogate.results`` besides the report)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from turbogate.results.schema import RequestRecord, Sample
from turbogate.results.summary import Summary, csv_rows

REQUESTS = "requests.jsonl"
SAMPLES = "samples.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
REPORT = "report.html"


def write_jsonl(path: Path, rows: Iterable[dict[str, object]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as f:
        for row in rows:
            f.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY))
            f.write(b"\n")
    tmp.replace(path)


def read_jsonl(path: Path) -> Iterator[dict[str, object]]:
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                row = orjson.loads(line)
                if isinstance(row, dict):
                    yield row


def write_summary(run_dir: Path, summary: Summary) -> None:
    (run_dir / SUMMARY_JSON).write_bytes(orjson.dumps(summary.to_dict(), option=orjson.OPT_INDENT_2))
    header, rows = csv_rows(summary)
    with (run_dir / SUMMARY_CSV).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(["" if v is None else v for v in row] for row in rows)


def write_run(run_dir: Path | str, records: Iterable[RequestRecord], samples: Iterable[Sample],
              summary: Summary, *, report: bool = True) -> Path:
    """Write a complete run folder; ``report`` also renders ``report.html``."""
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    recs = list(records)
    smps = list(samples)
    write_jsonl(out / REQUESTS, (r.to_dict() for r in recs))
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
    """Load a run folder written by ``turbogate bench`` or ``turbogate sim``."""
    path = Path(run_dir)
    summary_path = path / SUMMARY_JSON
    if not summary_path.is_file():
        raise FileNotFoundError(f"{path} is not a run folder: {SUMMARY_JSON} is missing")
    raw = orjson.loads(summary_path.read_bytes())
    if not isinstance(raw, dict):
        raise ValueError(f"{summary_path}: expected a JSON object")
    summary = Summary.from_dict(raw)
    reqs = [RequestRecord.from_dict(d) for d in read_jsonl(path / REQUESTS)] if with_requests else []
    smps: list[Sample] = []
    if with_samples and (path / SAMPLES).is_file():
        smps = [Sample.from_dict(d) for d in read_jsonl(path / SAMPLES)]
    return Run(path=path, summary=summary, requests=reqs, samples=smps)
