"""What each request asks for: lengths, prompt text, tier, API key, seed (pure; seeded RNG only).

Lengths come from truncated normal distributions sampled by *resampling*: a draw outside
[min, max] is thrown away and drawn again, never clamped (clamping piles mass on the bounds).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from turbogate.perf.default_workload import OUTPUT_TOKENS, PROMPT_TOKENS

TIER_BODY_VALUE = {"turbo": "priority", "standard": "default", "relax": "flex"}


def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _Phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2)))


@dataclass(frozen=True, slots=True)
class TruncNormal:
    """Integer lengths from N(mean, std) truncated to [lo, hi]."""

    mean: float
    std: float
    lo: int
    hi: int

    def __post_init__(self) -> None:
        if self.std < 0:
            raise ValueError(f"std must be >= 0, got {self.std}")
        if self.lo < 1 or self.hi < self.lo:
            raise ValueError(f"need 1 <= min <= max, got min={self.lo} max={self.hi}")
        if self.std == 0 and not self.lo <= round(self.mean) <= self.hi:
            raise ValueError(f"mean {self.mean} lies outside [{self.lo}, {self.hi}] with std 0")
        if self.std > 0 and self.mass() < 1e-4:
            raise ValueError(f"N({self.mean}, {self.std}) has almost no mass in [{self.lo}, {self.hi}]; "
                             "move the mean or widen the bounds")

    @classmethod
    def fixed(cls, tokens: int) -> TruncNormal:
        return cls(float(tokens), 0.0, tokens, tokens)

    @classmethod
    def parse(cls, spec: str, name: str = "lengths") -> TruncNormal:
        """``mean:std:min:max`` (or a single ``N`` for a fixed length)."""
        parts = spec.split(":")
        try:
            if len(parts) == 1:
                n = int(parts[0])
                return cls(float(n), 0.0, n, n)
            if len(parts) != 4:
                raise ValueError("expected 4 fields")
            return cls(float(parts[0]), float(parts[1]), int(parts[2]), int(parts[3]))
        except ValueError as exc:
            raise ValueError(f"{name}: {spec!r} is not mean:std:min:max or N ({exc})") from None

    def _a_b(self) -> tuple[float, float]:
        return (self.lo - self.mean) / self.std, (self.hi - self.mean) / self.std

    def mass(self) -> float:
        """Probability a raw normal draw lands in [lo, hi]."""
        if self.std == 0:
            return 1.0
        a, b = self._a_b()
        return _Phi(b) - _Phi(a)

    def expected_mean(self) -> float:
        """Mean of the truncated (continuous) distribution."""
        if self.std == 0:
            return float(round(self.mean))
        a, b = self._a_b()
        return self.mean + self.std * (_phi(a) - _phi(b)) / (_Phi(b) - _Phi(a))

    def sample(self, rng: random.Random) -> int:
        if self.std == 0:
            return round(self.mean)
        while True:
            x = rng.gauss(self.mean, self.std)
            if self.lo <= x <= self.hi:
                return min(self.hi, max(self.lo, round(x)))  # rounding only; x is already inside


@dataclass(frozen=True, slots=True)
class TierMix:
    """Weights of the tiers requests ask for; empty means no tier is asked."""

    weights: tuple[tuple[str, float], ...] = ()

    @classmethod
    def parse(cls, spec: str | None) -> TierMix:
        if not spec:
            return cls()
        pairs: list[tuple[str, float]] = []
        for item in spec.split(","):
            name, sep, value = item.partition("=")
            name = name.strip().lower()
            if not sep or name not in TIER_BODY_VALUE:
                raise ValueError(f"--tiers: {item!r} must be TIER=WEIGHT with TIER one of "
                                 f"{', '.join(TIER_BODY_VALUE)}")
            try:
                w = float(value)
            except ValueError:
                raise ValueError(f"--tiers: weight {value!r} of {name} is not a number") from None
            if w < 0:
                raise ValueError(f"--tiers: weight of {name} must be >= 0")
            pairs.append((name, w))
        total = sum(w for _, w in pairs)
        if total <= 0:
            raise ValueError("--tiers: weights must add up to more than 0")
        return cls(tuple((n, w / total) for n, w in pairs))

    def pick(self, rng: random.Random) -> str | None:
        if not self.weights:
            return None
        u = rng.random()
        acc = 0.0
        for name, w in self.weights:
            acc += w
            if u < acc:
                return name
        return self.weights[-1][0]


# A small built-in vocabulary: prompts are random word sequences, so no two share a prefix
# (prefix caches cannot flatter the result) and no corpus file needs shipping.
_VOCAB = (
    "the of and to in is that for it as with was on be by at this from or an are which have not has but "
    "were they all one been can there their more when will would who so if out up about into than them "
    "some could time only other new what these two may first then do any like my now over such our man "
    "me even most made after also did many before must through back years where much your way down "
    "should because each just those people how too little state good very make world still own see men "
    "work long get here between both life being under never day same another know while last might us "
    "great old year off come since against go came right used take three himself few house use during "
    "without again place around however home small found thought went say part once general high upon "
    "school every does got united left number course war until always away something fact though water "
    "less public put think almost hand enough far took head yet government system better set told "
    "nothing night end why called didn't eyes find going look asked later knew point next program city "
    "business give group toward young days let room president side social given present several order "
    "national possible rather second face per among form important often things looked early white case "
    "john become large big need four within felt along children saw best church ever least power "
    "development light thing seemed family interest want members mind country"
)
_WORDS = tuple(_VOCAB.split())


def synthetic_prompt(n_tokens: int, rng: random.Random) -> str:
    """About ``n_tokens`` tokens of text at the usual ~4 characters per token (OpenAI's rule of thumb)."""
    target = 4 * max(1, n_tokens)
    words: list[str] = []
    size = 0
    while size <= target:  # size counts a space after each word
        w = rng.choice(_WORDS)
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[:target]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of the schedule, before it is sent."""

    prompt: str
    max_tokens: int
    tier: str | None
    api_key: int | None  # index into the key list
    seed: int | None
    prompt_len_hint: int  # words asked for (the target's usage reports the real token count)


@dataclass(frozen=True, slots=True)
class Workload:
    prompt_tokens: TruncNormal = field(default_factory=lambda: TruncNormal.fixed(PROMPT_TOKENS))
    output_tokens: TruncNormal = field(default_factory=lambda: TruncNormal.fixed(OUTPUT_TOKENS))
    tiers: TierMix = field(default_factory=TierMix)
    n_api_keys: int = 0
    per_request_seed: bool = True
    dataset: Sequence[str] = ()  # prompts from a file; synthetic when empty

    def make(self, rng: random.Random) -> RequestSpec:
        if self.dataset:
            prompt = self.dataset[rng.randrange(len(self.dataset))]
            hint = len(prompt.split())
        else:
            hint = self.prompt_tokens.sample(rng)
            # The text has its own generator, seeded by one draw: a simulator that needs only the
            # lengths skips it with that one draw instead of drawing every word.
            prompt = synthetic_prompt(hint, random.Random(rng.getrandbits(64)))
        return RequestSpec(
            prompt=prompt,
            max_tokens=self.output_tokens.sample(rng),
            tier=self.tiers.pick(rng),
            api_key=rng.randrange(self.n_api_keys) if self.n_api_keys else None,
            seed=rng.randrange(2**31) if self.per_request_seed else None,
            prompt_len_hint=hint,
        )


def request_body(spec: RequestSpec, *, model: str, chat: bool, stream: bool, ignore_eos: bool,
                 min_tokens: bool, tier_in_body: bool) -> dict[str, Any]:
    """The OpenAI-style JSON body for ``spec`` (chat or completions route)."""
    body: dict[str, Any] = {"model": model, "max_tokens": spec.max_tokens, "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    if min_tokens:
        body["min_tokens"] = spec.max_tokens
    if spec.seed is not None:
        body["seed"] = spec.seed
    if spec.tier is not None and tier_in_body:
        body["service_tier"] = TIER_BODY_VALUE[spec.tier]
    return body
