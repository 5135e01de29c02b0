"""The coalescing rule (sched/coalesce.py): key, determinism, sliding window, cap, who leads —
pure, with a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turbogate.sched.coalesce import (
    CoalescePolicy,
    Coalescer,
    Follow,
    GroupState,
    Lead,
    deterministic,
    request_key,
)

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 8}


# ---- key ---------------------------------------------------------------------------------------
def test_key_ignores_key_order_at_every_level_and_integral_float_spelling() -> None:
    reordered = {"max_tokens": 8, "temperature": 0.0, "messages": [{"content": "hi", "role": "user"}], "model": "m"}
    assert request_key("acme", CHAT, BODY) == request_key("acme", CHAT, reordered)


def test_key_ignores_the_user_field_by_default_and_what_config_names() -> None:
    assert request_key("acme", CHAT, BODY) == request_key("acme", CHAT, {**BODY, "user": "alice"})
    assert request_key("acme", CHAT, BODY, ignored_fields=()) != request_key(
        "acme", CHAT, {**BODY, "user": "alice"}, ignored_fields=())
    assert request_key("acme", CHAT, BODY, ignored_fields=("user", "metadata")) == request_key(
        "acme", CHAT, {**BODY, "metadata": {"k": "v"}}, ignored_fields=("user", "metadata"))


@pytest.mark.parametrize("change", [
    {"max_tokens": 9},
    {"stream": True},
    {"stream_options": {"include_usage": True}},
    {"service_tier": "priority"},
    {"messages": [{"role": "user", "content": "hi!"}]},
    {"temperature": 0, "seed": 1},
])
def test_anything_that_changes_the_answer_changes_the_key(change: dict[str, object]) -> None:
    assert request_key("acme", CHAT, BODY) != request_key("acme", CHAT, {**BODY, **change})


def test_key_separates_tenants_routes_and_tiers() -> None:
    base = request_key("acme", CHAT, BODY, ("turbo", "turbo", ""))
    assert base != request_key("other", CHAT, BODY, ("turbo", "turbo", ""))
    assert base != request_key("acme", "/v1/completions", BODY, ("turbo", "turbo", ""))
    assert base != request_key("acme", CHAT, BODY, ("turbo", "standard", "tier_disabled"))
    assert base != request_key("acme", CHAT, BODY, ("standard", "turbo", ""))
    assert base == request_key("acme", CHAT, dict(BODY), ("turbo", "turbo", ""))


# ---- determinism -------------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "expected"), [
    ({"temperature": 0}, True),
    ({"temperature": 0.0}, True),
    ({"temperature": 0.7, "seed": 42}, True),
    ({"seed": 0}, True),
    ({}, False),  # the default temperature is 1
    ({"temperature": 0.7}, False),
    ({"temperature": 1, "seed": None}, False),
    ({"temperature": False}, False),  # a bool is not a temperature
    ({"temperature": 0.7, "seed": True}, False),  # nor a seed
    ({"temperature": 0.7, "seed": "42"}, False),
    ({"temperature": "0"}, False),
])
def test_deterministic_means_temperature_zero_or_a_fixed_seed(body: dict[str, object], expected: bool) -> None:
    assert deterministic(CHAT, body) is expected
    assert (request_key("acme", CHAT, body) is not None) is expected


def test_embeddings_never_sample() -> None:
    assert deterministic("/v1/embeddings", {"model": "m", "input": "x"})


@given(st.floats(min_value=0.01, max_value=2.0))
def test_a_sampled_request_never_gets_a_key(temperature: float) -> None:
    assert request_key("acme", CHAT, {**BODY, "temperature": temperature}) is None


# ---- window ------------------------------------------------------------------------------------
POLICY = CoalescePolicy(window_s=0.25, max_requests=4, max_span_s=1.0)


def test_first_leads_and_identical_requests_inside_the_sliding_window_follow() -> None:
    c = Coalescer(POLICY)
    lead = c.join("k", 0.0)
    assert isinstance(lead, Lead)
    # Each arrival slides the window: 0.2 s apart is inside it every time, 0.6 s after the first.
    for t in (0.2, 0.4, 0.6):
        got = c.join("k", t)
        assert isinstance(got, Follow) and got.group is lead.group
    assert lead.group.members == 4 and lead.group.followers == 3
    assert (c.groups, c.merged) == (1, 3)


def test_a_gap_longer_than_the_window_starts_a_new_group() -> None:
    c = Coalescer(POLICY)
    first = c.join("k", 0.0)
    second = c.join("k", 0.25)  # exactly the window after the last arrival: outside
    assert isinstance(first, Lead) and isinstance(second, Lead) and second.group is not first.group
    assert isinstance(c.join("k", 0.3), Follow)


def test_the_span_caps_the_total_time_a_group_takes_joiners() -> None:
    c = Coalescer(CoalescePolicy(window_s=0.25, max_requests=100, max_span_s=1.0))
    lead = c.join("k", 0.0)
    t = 0.0
    while t + 0.2 < 1.0:
        t += 0.2
        assert isinstance(c.join("k", t), Follow)
    late = c.join("k", 1.0)  # inside the sliding window, but the span is spent
    assert isinstance(late, Lead) and late.group is not lead.group


def test_max_requests_closes_the_group_and_the_next_one_leads() -> None:
    c = Coalescer(POLICY)
    lead = c.join("k", 0.0)
    kinds = [type(c.join("k", 0.01 * i)) for i in range(1, 6)]
    assert kinds == [Follow, Follow, Follow, Lead, Follow]
    assert lead.group.members == POLICY.max_requests


def test_different_keys_never_share() -> None:
    c = Coalescer(POLICY)
    assert isinstance(c.join("a", 0.0), Lead)
    assert isinstance(c.join("b", 0.0), Lead)
    assert c.merged == 0


# ---- the call's end, and clients leaving -------------------------------------------------------
def test_a_good_answer_is_replayed_to_joiners_inside_its_window() -> None:
    c = Coalescer(POLICY)
    lead = c.join("k", 0.0)
    c.finished(lead.group, ok=True, now=0.1)
    assert lead.group.state is GroupState.ANSWERED
    assert isinstance(c.join("k", 0.2), Follow)
    assert isinstance(c.join("k", 0.5), Lead)  # 0.3 s after the last arrival


def test_a_failed_call_takes_no_one_new() -> None:
    c = Coalescer(POLICY)
    lead = c.join("k", 0.0)
    c.finished(lead.group, ok=False, now=0.05)
    again = c.join("k", 0.06)
    assert isinstance(again, Lead) and again.group is not lead.group


def test_the_call_is_cancelled_only_when_every_member_left_early() -> None:
    c = Coalescer(POLICY)
    lead = c.join("k", 0.0)
    c.join("k", 0.1)
    assert c.left(lead.group, whole=False) is False  # the leader's client left: the follower still waits
    assert lead.group.state is GroupState.RUNNING
    assert isinstance(c.join("k", 0.2), Follow)
    assert c.left(lead.group, whole=False) is False
    assert c.left(lead.group, whole=False) is True  # the last one: cancel the call
    assert lead.group.state is GroupState.ABANDONED
    assert isinstance(c.join("k", 0.3), Lead)  # an abandoned call takes no one


def test_members_done_with_the_whole_answer_never_cancel() -> None:
    c = Coalescer(POLICY)
    lead = c.join("k", 0.0)
    assert c.left(lead.group, whole=True) is False
    c.finished(lead.group, ok=True, now=0.1)
    assert lead.group.state is GroupState.ANSWERED


def test_expired_groups_are_forgotten() -> None:
    c = Coalescer(POLICY)
    for i in range(50):
        c.join(f"k{i}", i * 0.01)
    assert c.open_groups() == 50
    c.expire(10.0)
    assert c.open_groups() == 0


@pytest.mark.parametrize("bad", [{"window_s": 0}, {"max_span_s": -1}, {"max_requests": 1}])
def test_policy_refuses_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CoalescePolicy(**bad)


@given(st.lists(st.tuples(st.sampled_from("ab"), st.floats(min_value=0, max_value=0.3)), max_size=40))
def test_no_group_exceeds_its_limits(arrivals: list[tuple[str, float]]) -> None:
    c = Coalescer(POLICY)
    now = 0.0
    groups = []
    for key, gap in arrivals:
        now += gap
        decision = c.join(key, now)
        if isinstance(decision, Lead):
            groups.append(decision.group)
    for g in groups:
        assert 1 <= g.members <= POLICY.max_requests
        assert g.last_arrival - g.opened < POLICY.max_span_s
    assert c.merged + c.groups == len(arrivals)


def test_the_worked_example_of_the_docs() -> None:
    """docs/gateway.md, "Coalescing": the table, decision by decision, with the default policy."""
    c = Coalescer(CoalescePolicy())
    ctx = ("standard", "standard", "")
    a = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "Capital of France?"}], "temperature": 0,
         "max_tokens": 16}
    b = {**a, "messages": [{"role": "user", "content": "Capital of Spain?"}]}
    reordered = {"max_tokens": 16, "temperature": 0.0, "model": "llama-3.1-8b",
                 "messages": [{"content": "Capital of France?", "role": "user"}]}
    timeline = [(0.00, "acme", a), (0.10, "acme", {**a, "user": "bob"}), (0.15, "acme", {**a, "temperature": 0.7}),
                (0.20, "globex", a), (0.30, "acme", b), (0.32, "acme", reordered), (0.60, "acme", a),
                (0.70, "acme", a)]
    groups: dict[int, int] = {}
    decisions = []
    for t, tenant, body in timeline:
        key = request_key(tenant, CHAT, body, ctx)
        if key is None:
            decisions.append("alone")
            continue
        d = c.join(key, t)
        number = groups.setdefault(id(d.group), len(groups) + 1)
        decisions.append(f"{'lead' if isinstance(d, Lead) else 'follow'} {number}")
    assert decisions == ["lead 1", "follow 1", "alone", "lead 2", "lead 3", "follow 1", "lead 4", "follow 4"]
    assert (c.groups, c.merged) == (4, 3)
