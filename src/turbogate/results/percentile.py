"""The project's one percentile, as the run's modules import it.  It lives in
``turbogate.percentile``, a module with no imports beyond the standard library, so the pure core
(``sched/``, compiled) takes it without pulling in this package and numpy."""

from turbogate.percentile import percentile, percentile_sorted, percentiles

__all__ = ["percentile", "percentile_sorted", "percentiles"]
