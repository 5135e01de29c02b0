"""The run schema shared by bench (measured) and sim (predicted): records, statistics, knee, ROI, report.

Read a run with :func:`load_run`; ``run.summary.latency_curve(tier)`` and ``run.summary.knees``
give the per-step per-tier curves and the knee.  See docs/results-schema.md.
"""

from turbogate.results.compare import CompareRow, compare
from turbogate.results.io import REPORT, REQUESTS, SAMPLES, SUMMARY_CSV, SUMMARY_JSON, Run, load_run, write_run
from turbogate.results.knee import Knee, KneeSettings, detect_knee, detect_knees
from turbogate.results.roi import CostConfig, RoiRow, band_of, recommendation, roi_table
from turbogate.results.schema import ALL, SCHEMA_VERSION, RequestRecord, Sample, Step
from turbogate.results.stats import SLO, Dist, GroupStats, StepStats, group_stats, step_stats, tier_key
from turbogate.results.summary import Summary, summarize
from turbogate.results.timing import StreamTiming, stream_timing, tpot

__all__ = [
    "ALL", "REPORT", "REQUESTS", "SAMPLES", "SCHEMA_VERSION", "SLO", "SUMMARY_CSV", "SUMMARY_JSON",
    "CompareRow", "CostConfig", "Dist", "GroupStats", "Knee", "KneeSettings", "RequestRecord", "RoiRow", "Run",
    "Sample", "Step", "StepStats", "StreamTiming", "Summary", "band_of", "compare", "detect_knee", "detect_knees",
    "group_stats", "load_run", "recommendation", "roi_table", "step_stats", "stream_timing", "summarize",
    "tier_key", "tpot", "write_run",
]
