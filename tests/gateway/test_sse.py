"""Chunk rewriting: each SSE event names the tier, chunk boundaries anywhere (pure)."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from turbogate.gateway.sse import SSERewriter, tag_json_body


def events(payloads: list[dict[str, object]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(p) + b"\n\n" for p in payloads) + b"data: [DONE]\n\n"


def parse(stream: bytes) -> list[object]:
    out: list[object] = []
    for event in stream.split(b"\n\n"):
        if event.startswith(b"data: ") and event != b"data: [DONE]":
            out.append(orjson.loads(event[6:]))
    return out


@given(
    st.lists(st.dictionaries(st.sampled_from(["id", "content", "x"]), st.text(max_size=20), min_size=1),
             min_size=1, max_size=6),
    st.lists(st.integers(1, 50), max_size=20),
)
def test_every_event_is_tagged_whatever_the_chunking(payloads: list[dict[str, object]], cuts: list[int]) -> None:
    data = events(payloads)
    rw = SSERewriter("turbo")
    out = b""
    pos = 0
    for cut in cuts:
        out += rw.feed(data[pos : pos + cut])
        pos += cut
    out += rw.feed(data[pos:]) + rw.flush()
    parsed = parse(out)
    assert parsed == [{"service_tier": "turbo", **p} for p in payloads]
    assert out.endswith(b"data: [DONE]\n\n")


def test_existing_service_tier_is_overwritten() -> None:
    rw = SSERewriter("relax")
    out = rw.feed(events([{"service_tier": None, "id": 1}, {"id": 2}])) + rw.flush()
    assert parse(out) == [{"service_tier": "relax", "id": 1}, {"service_tier": "relax", "id": 2}]


def test_text_that_looks_like_sse_inside_content_is_untouched() -> None:
    rw = SSERewriter("turbo")
    out = rw.feed(events([{"content": "\ndata: {"}]))
    assert parse(out) == [{"service_tier": "turbo", "content": "\ndata: {"}]


def test_tag_json_body() -> None:
    assert orjson.loads(tag_json_body(b'{"id": 1}', "turbo")) == {"service_tier": "turbo", "id": 1}
    assert orjson.loads(tag_json_body(b"{}", "turbo")) == {"service_tier": "turbo"}
    assert orjson.loads(tag_json_body(b'{"service_tier": "default"}', "relax")) == {"service_tier": "relax"}
    assert tag_json_body(b"not json", "turbo") == b"not json"
