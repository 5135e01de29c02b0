"""SGLang's own scheduling rules replayed on the perf model's step time, against the published SGLang runs
(``turbogate.perf.published``: datacrunch-research/h200-benchmarks @ c091ef53, Llama-3.3-70B bf16 on 4x H200,
TP4).  Prints ONE JSON object.  It diagnoses the five offline cells; nothing is tuned on them.

The stepped engine schedules like vLLM V1 unless its profile says otherwise (under the ``sglang`` profile it
runs the first two rules below itself: ``engine/reserve.py``).  The SGLang build those runs used (early
2025) differs in ways its source documents (``python/sglang/srt/managers/scheduler.py`` and
``schedule_policy.py`` of that time), and this script replays them, so a miss that survives the replay is not
the scheduler's:

* prefill first: whenever a waiting request fits, the next step is a prefill batch and it runs alone (mixed
  chunked prefill is off by default); decode steps run only when nothing can be admitted;
* admission of ``ignore_eos`` requests with the radix cache off (``bench_serving`` sets ``ignore_eos``; the runs
  pass ``--disable-radix-cache``): ``PrefillAdder.add_one_req_ignore_eos`` admits a request only if it and every
  running request can reach their ``max_new_tokens`` without the KV pool running out, so nothing is retracted;
* ``chunked_prefill_size`` 8192, ``max_prefill_tokens`` 16384, ``max_running_requests`` 4096, KV pages of one
  token, ``mem_fraction_static`` 0.85 at TP4 (the cells' ``gpu_mem_util``).

Step times are ``Deployment.step_time``, the roofline the engine uses.  For each run the output gives
throughput, median TTFT and median ITL (a decoding request's gap between tokens: the decode step plus any
prefill batch run in between) beside the published ones, and the prefill rate the published median TTFT
implies at least (under FCFS the median request's first token follows every earlier prompt's prefill).

The KV read efficiency of that SGLang build (``SGLANG_KV_BW_EFFICIENCY``) is fitted here, on one
measurement that is none of the five offline cells: the median ITL of the online run at 4 requests/s, where
about 50 requests of ~770 tokens decode at once, so the step is the weights plus a KV read that still shows.
``--fit-kv`` prints the value that makes the replay's median ITL equal the published one.  The online runs
at 8 and 16 req/s (at and past saturation) and the five offline cells check it.

    python benchmarks/sglang_replay.py [--fit-kv] [--kv-bw-efficiency X]
"""

from __future__ import annotations

import argparse
import bisect
import json
import random
import statistics

from turbogate.perf import Deployment, deployment, get_gpu, get_model
from turbogate.perf.published import (
    OTHER_ENGINE_CELLS,
    SGLANG_OFFLINE_MEDIANS,
    SGLANG_ONLINE_1024,
    SGLANG_ONLINE_SOURCE,
    SGLANG_SOURCE,
)

CHUNK = 8192  # chunked_prefill_size
MAX_PREFILL = 16384  # max_prefill_tokens
MAX_RUNNING = 4096  # max_running_requests (req_to_token pool) for this model and KV size


def admits(states: list[tuple[int, int]], free: int) -> bool:
    """SGLang's ``add_one_req_ignore_eos`` check: ``states`` = (tokens left, tokens held) of every request
    (the candidate included), sorted by tokens left; ``free`` = KV tokens free once the candidate's prompt is in."""
    freed = 0
    n = len(states)
    for i, (left, held) in enumerate(states):
        steps = states[i + 1][0] if i + 1 < n else left
        if free + freed - steps * (n - i) <= 0:
            return False
        freed += held
    return True


class Req:
    __slots__ = ("arrival", "done", "first", "isl", "last", "osl", "out")

    def __init__(self, arrival: float, isl: int, osl: int) -> None:
        self.arrival, self.isl, self.osl = arrival, isl, osl
        self.done = 0  # prompt tokens prefilled
        self.out = 0  # output tokens produced
        self.first = -1.0  # time of the first token
        self.last = -1.0  # time of the latest token


def replay(dep: Deployment, reqs: list[Req]) -> dict[str, float]:
    """Run ``reqs`` (sorted by arrival) through SGLang's rules; throughput, median TTFT and ITL."""
    cap = dep.kv_capacity_tokens
    pending = list(reversed(reqs))  # not yet arrived, earliest last
    waiting: list[Req] = []
    running: list[Req] = []
    chunked: Req | None = None
    used = 0  # KV tokens held
    t = 0.0
    full = False
    gaps: list[float] = []  # one per decoded token after a request's first
    while pending or waiting or running or chunked:
        while pending and pending[-1].arrival <= t:
            waiting.append(pending.pop())
        if not (waiting or running or chunked):
            t = pending[-1].arrival
            continue
        batch: list[tuple[Req, int]] = []  # (request, tokens prefilled this step)
        if chunked is not None or (waiting and not full):
            budget, room, free = CHUNK, MAX_PREFILL, cap - used
            if chunked is not None:
                n = min(chunked.isl - chunked.done, budget)
                batch.append((chunked, n))
                budget, room, free = budget - n, room - n, free - n
            states: list[tuple[int, int]] | None = None
            while waiting and budget > 0 and room > 0 and (not batch or batch[-1][0].done + batch[-1][1]
                                                             >= batch[-1][0].isl):
                if len(running) + len(batch) >= MAX_RUNNING:
                    full = True
                    break
                head = waiting[0]
                if states is None:
                    states = sorted([(r.osl - r.out, r.isl + r.out) for r in running]
                                    + [(r.osl, r.isl) for r, _ in batch])
                bisect.insort(states, (head.osl, head.isl))
                if not admits(states, free - head.isl):
                    full = True
                    break
                waiting.pop(0)
                n = min(head.isl, budget)
                batch.append((head, n))
                budget, room, free = budget - n, room - n, free - n
        if batch:
            tokens = sum(n for _, n in batch)
            cached = sum(r.done for r, _ in batch)
            t += dep.step_time(tokens, 0, 0, cached, prefill_seqs=len(batch))
            used += tokens
            chunked = None
            for r, n in batch:
                r.done += n
                if r.done < r.isl:
                    chunked = r
                    continue
                r.out, r.first, r.last = 1, t, t
                used += 1
                running.append(r)
        else:
            # Cached per request: its prompt and every output token but the newest, which this step writes.
            t += dep.step_time(0, len(running), sum(r.isl + r.out - 1 for r in running))
            used += len(running)
            for r in running:
                r.out += 1
                gaps.append(t - r.last)
                r.last = t
        still: list[Req] = []
        for r in running:
            if r.out >= r.osl:
                used -= r.isl + r.out
                full = False
            else:
                still.append(r)
        running = still
        if used > cap:
            raise AssertionError(f"KV overflow: {used} > {cap} (the admission rule should prevent it)")
    return {"duration_s": t, "output_tok_s": sum(r.osl for r in reqs) / t,
            "median_ttft_s": statistics.median(r.first - r.arrival for r in reqs),
            "median_itl_s": statistics.median(gaps) if gaps else 0.0}


def _requests(isl: int, osl: int, n: int, rate: float = 0.0) -> list[Req]:
    """Lengths uniform in 1..isl and 1..osl (engine_calibration's draws); Poisson arrivals at ``rate``."""
    lengths, arrivals = random.Random(0), random.Random(1)
    t, out = 0.0, []
    for _ in range(n):
        out.append(Req(t, lengths.randint(1, isl), lengths.randint(1, osl)))
        if rate > 0:
            t += arrivals.expovariate(rate)
    return out


def _err(pred: float, pub: float) -> float:
    return round((pred - pub) / pub, 4)


def fit_kv_efficiency(dep: Deployment) -> float:
    """The KV read efficiency at which the replay's median ITL at 4 req/s equals the published one
    (bisection; the ITL falls as the efficiency rises)."""
    rate, n, itl, _ttft, _tok_s = next(row for row in SGLANG_ONLINE_1024 if row[0] == 4.0)
    lo, hi = 0.02, 1.0
    for _ in range(20):
        mid = (lo + hi) / 2
        got = replay(dep.with_factors(kv_bw_efficiency=mid), _requests(1024, 1024, n, rate))["median_itl_s"]
        lo, hi = (mid, hi) if got > itl else (lo, mid)
    return round((lo + hi) / 2, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit-kv", action="store_true", help="print the fitted KV read efficiency and stop")
    parser.add_argument("--kv-bw-efficiency", type=float, default=None,
                        help="KV read efficiency to replay with (default: the cells' own; 0: the weights')")
    args = parser.parse_args()
    cell0 = OTHER_ENGINE_CELLS[0]
    dep = deployment(get_gpu(cell0.gpu), get_model(cell0.model), tp=cell0.tp, weight_dtype=cell0.dtype,
                     kv_dtype=cell0.kv_dtype, gpu_mem_util=cell0.gpu_mem_util)
    if args.fit_kv:
        print(json.dumps({"kv_bw_efficiency": fit_kv_efficiency(dep), "fitted_on": SGLANG_ONLINE_SOURCE,
                          "row": "4 req/s median ITL"}))
        return
    kv = cell0.kv_bw_efficiency if args.kv_bw_efficiency is None else (args.kv_bw_efficiency or None)
    if kv is not None:
        dep = dep.with_factors(kv_bw_efficiency=kv)
    offline = []
    for cell in OTHER_ENGINE_CELLS:
        reqs = _requests(cell.isl, cell.osl, cell.requests)
        got = replay(dep, reqs)
        ttft, itl, duration = SGLANG_OFFLINE_MEDIANS[(cell.isl, cell.osl)]
        median_prompts = sum(r.isl for r in reqs[: (len(reqs) + 1) // 2])
        offline.append({
            "isl": cell.isl, "osl": cell.osl, "requests": cell.requests,
            "published_tok_s": cell.output_tok_s, "replay_tok_s": round(got["output_tok_s"]),
            "replay_error": _err(got["output_tok_s"], cell.output_tok_s),
            "published_duration_s": duration, "replay_duration_s": round(got["duration_s"], 1),
            "published_median_ttft_s": ttft, "replay_median_ttft_s": round(got["median_ttft_s"], 1),
            "published_median_itl_ms": round(itl * 1000, 1),
            "replay_median_itl_ms": round(got["median_itl_s"] * 1000, 1),
            "prefill_tok_s_published_at_least": round(median_prompts / ttft),
        })
    online = []
    for rate, n, itl, ttft, tok_s in SGLANG_ONLINE_1024:
        got = replay(dep, _requests(1024, 1024, n, rate))
        online.append({"rate": rate, "requests": n, "fitted_on": rate == 4.0,
                       "published_median_itl_ms": round(itl * 1000, 2),
                       "replay_median_itl_ms": round(got["median_itl_s"] * 1000, 2),
                       "itl_error": _err(got["median_itl_s"], itl),
                       "published_tok_s": tok_s, "replay_tok_s": round(got["output_tok_s"]),
                       "tok_s_error": _err(got["output_tok_s"], tok_s),
                       "published_median_ttft_ms": round(ttft * 1000, 1),
                       "replay_median_ttft_ms": round(got["median_ttft_s"] * 1000, 1)})
    print(json.dumps({
        "source": SGLANG_SOURCE, "online_source": SGLANG_ONLINE_SOURCE,
        "model_prefill_tok_s": round(CHUNK / dep.step_time(CHUNK, 0, 0)),
        "kv_capacity_tokens": dep.kv_capacity_tokens, "kv_bw_efficiency": dep.kv_bw_efficiency,
        "offline": offline, "online": online,
    }))


if __name__ == "__main__":
    main()
