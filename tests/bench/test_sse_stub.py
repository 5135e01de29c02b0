"""The fixed SSE answer that ``benchmarks/bench_capacity.py``'s workers block serves from nginx
(``openai_stub.sse_chat_stream``) is a stream the bench reads whole: every event timed, the usage
chunk's token count taken, ``[DONE]`` seen — in whatever pieces the socket delivers it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from turbogate.bench.client import Outcome, SSEReader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from openai_stub import sse_chat_stream


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_the_bench_reads_the_fixed_stream_whole(piece: int) -> None:
    body = sse_chat_stream(32)
    out = Outcome(sent=0.0, end=0.0)
    reader = SSEReader(out)
    done = False
    for i in range(0, len(body), piece):
        done = reader.feed(body[i:i + piece], 1.0 + i * 1e-6)
        if done:  # the client stops reading at [DONE]
            break
    reader.finish()
    assert done and out.ok, out.error
    assert out.output_tokens == 32 and out.prompt_tokens == 8
    assert sum(1 for _, has_output in reader.chunks if has_output) == 32  # every event parsed and timed


def test_a_stream_needs_at_least_one_event() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        sse_chat_stream(0)
