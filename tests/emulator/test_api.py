"""The emulator's OpenAI surface, driven by the official openai client over real HTTP."""

from __future__ import annotations

import math
import urllib.error
import urllib.request

import openai
import pytest

from tests.emulator.conftest import MODEL
from turbogate.procs import Service


def chat_prompt_estimate(*contents: str) -> int:
    # Documented estimator: BOS + Σ(5 + ceil(chars/4)) + 4 for the assistant header.
    return 1 + sum(5 + math.ceil(len(c) / 4) for c in contents) + 4


def test_models_lists_the_served_name(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_chat_completion_usage_and_ignore_eos(client: openai.OpenAI) -> None:
    content = "Hello there, emulator!"
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                          max_tokens=12, extra_body={"ignore_eos": True})
    choice = resp.choices[0]
    assert resp.object == "chat.completion" and resp.model == MODEL
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "length"
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 12
    assert resp.usage.prompt_tokens == chat_prompt_estimate(content)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 12
    assert len((choice.message.content or "").split()) == 12  # one word per token


def test_max_tokens_and_min_tokens_bound_the_natural_length(client: openai.OpenAI) -> None:
    lengths = set()
    for seed in range(12):
        resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=10, seed=seed, extra_body={"min_tokens": 4})
        assert resp.usage is not None
        n = resp.usage.completion_tokens
        assert 4 <= n <= 10
        assert resp.choices[0].finish_reason == ("length" if n == 10 else "stop")
        lengths.add(n)
    assert len(lengths) > 1, "output length should vary with the seed when EOS is allowed"


def test_max_completion_tokens_is_honoured(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                          max_completion_tokens=5, extra_body={"ignore_eos": True})
    assert resp.usage is not None and resp.usage.completion_tokens == 5


def test_same_seed_same_text(client: openai.OpenAI) -> None:
    def ask() -> str:
        resp = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=20, seed=42)
        return resp.choices[0].text

    assert ask() == ask()


def test_completion_prompt_tokens(client: openai.OpenAI) -> None:
    prompt = "The quick brown fox jumps over the lazy dog"
    resp = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, extra_body={"ignore_eos": True})
    assert resp.object == "text_completion"
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == 1 + math.ceil(len(prompt) / 4)
    assert resp.usage.completion_tokens == 3
    ids = client.completions.create(model=MODEL, prompt=[1, 2, 3, 4, 5, 6, 7], max_tokens=2)
    assert ids.usage is not None and ids.usage.prompt_tokens == 7


def test_chat_streaming_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "stream please"}],
                                            max_tokens=9, stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content_chunks = [c for c in chunks[1:] if c.choices]
    assert len(content_chunks) == 9
    assert all(c.choices[0].finish_reason is None for c in content_chunks[:-1])
    assert content_chunks[-1].choices[0].finish_reason == "length"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 9
    assert last.usage.prompt_tokens == chat_prompt_estimate("stream please")
    assert all(c.id == chunks[0].id for c in chunks)


def test_completion_streaming_text_matches_tokens(client: openai.OpenAI) -> None:
    stream = client.completions.create(model=MODEL, prompt="abc", max_tokens=6, stream=True, seed=3,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert len(text.split()) == usage.completion_tokens
    plain = client.completions.create(model=MODEL, prompt="abc", max_tokens=6, seed=3)
    assert plain.choices[0].text == text, "streaming and not give the same text for one seed"


def test_raw_sse_framing(fast_emulator: Service) -> None:
    req = urllib.request.Request(
        fast_emulator.url + "/v1/completions", method="POST", headers={"content-type": "application/json"},
        data=b'{"model": "llama-3.1-8b", "prompt": "x", "max_tokens": 2, "ignore_eos": true, "stream": true}')
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        body = resp.read().decode()
    events = body.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-2]) and len(events[:-2]) == 2


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}, "max_tokens"),
        ({"model": MODEL}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": MODEL, "messages": "hello"}, "messages"),
        ({"model": MODEL, "messages": [{"content": "x"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "priority": 1}, "priority"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "min_tokens": 5},
         "min_tokens"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream_options": {}}, "stream_options"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 10**7}, "max_tokens"),
    ],
)
def test_bad_chat_bodies_name_the_field(client: openai.OpenAI, body: dict[str, object], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/chat/completions", cast_to=object, body=body)
    assert info.value.status_code == 400
    assert info.value.param == param
    assert param.split("[")[0].split(".")[0] in info.value.message


def test_bad_completion_prompt(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/completions", cast_to=object, body={"model": MODEL, "prompt": {"text": "x"}})
    assert info.value.param == "prompt"
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/completions", cast_to=object, body={"model": MODEL})
    assert info.value.param == "prompt"


def test_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-17", messages=[{"role": "user", "content": "x"}])
    assert info.value.param == "model"
    assert "gpt-17" in info.value.message


def test_malformed_json_is_a_400_with_an_openai_error_body(fast_emulator: Service) -> None:
    req = urllib.request.Request(fast_emulator.url + "/v1/chat/completions", data=b"{not json", method="POST",
                                 headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 400
    import json

    error = json.loads(info.value.read())["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == "body"


def test_unknown_path_is_404(fast_emulator: Service) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(fast_emulator.url + "/v1/nothing", timeout=5)
    assert info.value.code == 404


def test_context_limit_follows_a_small_kv_cache(emulator_factory) -> None:  # type: ignore[no-untyped-def]
    # 4 blocks of 16 tokens: max_model_len 64, served under another name.
    svc = emulator_factory("--time-scale", "0", "--num-gpu-blocks", "4", "--served-model-name", "tiny")
    client = openai.OpenAI(base_url=svc.url + "/v1", api_key="unused", max_retries=0)
    assert client.models.list().data[0].model_extra["max_model_len"] == 64  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x" * 400}])
    assert info.value.param == "messages" and "maximum context length is 64" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x" * 40}], max_tokens=60)
    assert info.value.param == "max_tokens"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2)
    resp = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=40,
                                          extra_body={"ignore_eos": True})
    assert resp.usage is not None and resp.usage.completion_tokens == 40 and resp.model == "tiny"
