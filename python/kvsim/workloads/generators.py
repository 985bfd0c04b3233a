"""Synthetic workloads: seeded, vectorised request tables (arrivals, lengths, prefixes, conversations).

Everything is drawn from numpy `Generator(PCG64)` streams spawned from one `SeedSequence(seed)`, one
stream per concern (content key, arrivals, lengths, prefix sharing), so the same seed reproduces a table
bit for bit, and changing, say, the arrival rate leaves the drawn lengths untouched. No Python object is
made per request: columns are built whole and handed to `Workload`.

Length presets (`lengths=`):

| preset | prompt | output | notes |
|---|---|---|---|
| `sharegpt-paper` | lognormal, mean 161.31, sigma 0.77 | lognormal, mean 337.99, sigma 0.56 | PagedAttention §6.1 means |
| `alpaca-paper` | lognormal, mean 19.31, sigma 0.77 | lognormal, mean 58.45, sigma 0.56 | PagedAttention §6.1 means |
| `sharegpt-real` | resampled (prompt, output) pairs of `sharegpt_lengths/` in the traces folder | | |
| `fixed` | `prompt_len` | `output_len` | `length_params` |
| `uniform` | `prompt_len=(lo, hi)` | `output_len=(lo, hi)` | inclusive integer ranges |
| `normal` | `prompt_mean`, `prompt_std` | `output_mean`, `output_std` | rounded, clipped to >= 1 |
| `lognormal` | `prompt_mean`, `prompt_sigma` | `output_mean`, `output_sigma` | means matched as below |
| `empirical` | pairs resampled from `path` (csv/jsonl/parquet; `prompt_column`, `output_column`) | | |

How the paper presets' spread was chosen: the paper gives only the means (and histograms), so the shape
is a lognormal whose sigma gives the coefficient of variation of the real ShareGPT pairs shipped in
`shared/traces/sharegpt_lengths` (prompt CV 0.89 -> sigma = sqrt(ln(1 + 0.89**2)) ~ 0.77; output CV 0.61 ->
sigma ~ 0.56); Alpaca, for want of data, uses the same shape. Lengths are rounded to the nearest integer and
clipped to `max_model_len` (2048 by default for the paper presets, OPT's context): prompt to
`[1, max_model_len - 1]`, output to `[1, max_model_len - prompt]`, so every request fits. The lognormal's
μ is then solved (bisection on the exact expectation of the rounded, clipped discrete distribution) so
that the *means after clipping* equal the stated means exactly in expectation; for these presets the
correction is below 0.1 %. For `lognormal` without `max_model_len`, μ matches the continuous mean.

Arrivals: `arrival_rate` is requests per second overall. The first request arrives at 0 and the gaps
are exponential (`poisson`), gamma with coefficient of variation `burstiness` (`gamma`; shape
1/burstiness², so burstiness 1 is Poisson and larger is burstier; note vLLM's `--burstiness` is the
*shape*, i.e. 1/CV²), all equal to 1/rate (`constant`), or zero (`all-at-once`).

Conversations (`turns > 1`): requests are grouped into conversations of `turns` turns (the last may be
shorter). Conversations start at rate `arrival_rate / turns`; turn t arrives `t * turn_interval` seconds
after its conversation starts. Each turn draws a new message length and an output length from the
length distribution; its prompt is the previous turn's prompt, then the previous turn's answer as the
segment `(output_id(previous request, 0), its generated length)`, then the new message. Prompts of later
turns therefore grow past `max_model_len`; only the per-turn message and output are clipped.

Shared prefixes: with `system_prompt_len > 0`, `num_system_prompts` system prompts exist and exactly
`round(sharing_ratio * conversations)` conversations (chosen at random) start with one of them (chosen
uniformly); the system prompt is added in front of the drawn message, so it lengthens the prompt.

Sampling: `num_samples=n` is parallel sampling; `beam_width=w` stores `num_samples = w` and sets the
table's `beam` column (the two cannot be combined). `max_tokens`: `"exact"` (the true output length),
`("fixed", cap)` or an int (the same cap for all), or `("multiple", f)` (ceil(f x output length)).
"""

from __future__ import annotations

import functools
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.arguments import int_arg
from kvsim.errors import InvalidArgumentError
from kvsim.model.segments import MAX_REQUEST_ID, MAX_SAMPLES, OUTPUT_BIT
from kvsim.workloads.ids import content_ids
from kvsim.workloads.table import Workload
from kvsim.workloads.trace_table import read_length_pairs

PAPER_PRESETS: dict[str, tuple[float, float]] = {
    # (mean prompt tokens, mean output tokens): PagedAttention (Kwon et al., SOSP 2023) §6.1.
    "sharegpt-paper": (161.31, 337.99),
    "alpaca-paper": (19.31, 58.45),
}
PAPER_SIGMA_PROMPT = 0.77
PAPER_SIGMA_OUTPUT = 0.56
PAPER_MAX_MODEL_LEN = 2048
SHAREGPT_FILE = "sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
LENGTH_KINDS = (
    "sharegpt-paper",
    "alpaca-paper",
    "sharegpt-real",
    "fixed",
    "uniform",
    "normal",
    "lognormal",
    "empirical",
)
ARRIVAL_KINDS = ("poisson", "gamma", "constant", "all-at-once")
LENGTH_PARAMS: dict[str, tuple[str, ...]] = {
    "sharegpt-paper": (),
    "alpaca-paper": (),
    "sharegpt-real": ("path",),
    "fixed": ("prompt_len", "output_len"),
    "uniform": ("prompt_len", "output_len"),
    "normal": ("prompt_mean", "prompt_std", "output_mean", "output_std"),
    "lognormal": ("prompt_mean", "prompt_sigma", "output_mean", "output_sigma"),
    "empirical": ("path", "prompt_column", "output_column"),
}
_EMPIRICAL_COLUMNS = (
    ("prompt_len", "output_len"),
    ("num_prefill_tokens", "num_decode_tokens"),
    ("input_length", "output_length"),
    ("ContextTokens", "GeneratedTokens"),
)


def traces_dir() -> Path:
    """The shared traces folder: `$KVSIM_TRACES`, else `shared/traces` beside the project checkout."""
    env = os.environ.get("KVSIM_TRACES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "traces"


# ------------------------------------------------------------------------------------ distributions


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    return np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in z.tolist()])


def _lognormal_cdf(x: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    return _norm_cdf((np.log(x) - mu) / sigma)


def _prompt_pmf(mu: float, sigma: float, hi: int) -> np.ndarray:
    """P(clip(rint(X), 1, hi) = k) for k = 1..hi, X lognormal(mu, sigma)."""
    cdf = _lognormal_cdf(np.arange(1, hi, dtype=np.float64) + 0.5, mu, sigma)  # F(1.5) .. F(hi - 0.5)
    return np.diff(np.concatenate([[0.0], cdf, [1.0]]))


def _bisect_mu(mean_of_mu: Any, target: float, sigma: float) -> float:
    """Solves mean_of_mu(mu) = target for mu (the clipped mean rises monotonically with mu)."""
    lo = math.log(max(target, 1e-9)) - sigma * sigma / 2 - 10.0
    hi = math.log(max(target, 1e-9)) - sigma * sigma / 2 + 10.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if mean_of_mu(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@functools.lru_cache(maxsize=64)
def calibrated_mus(
    prompt_mean: float, prompt_sigma: float, output_mean: float, output_sigma: float, max_model_len: int
) -> tuple[float, float]:
    """The lognormal μs whose rounded, clipped samples have exactly the given means in expectation.

    Prompts are `clip(rint(X), 1, L-1)`; outputs `clip(rint(Y), 1, L - prompt)`, L = `max_model_len`.
    E[min(max(rint(Y), 1), c)] = sum_{k<c} P(max(rint(Y), 1) > k), a cumulative sum over k, so the
    output's expectation over every prompt length costs O(L) per trial μ.

    Raises:
        InvalidArgumentError: a mean that the clipped range cannot reach.
    """
    big = max_model_len
    if not 1 <= prompt_mean <= big - 1:
        raise InvalidArgumentError(
            f"prompt mean {prompt_mean} must lie in [1, max_model_len - 1 = {big - 1}]"
        )
    if not 1 <= output_mean < big - prompt_mean:
        raise InvalidArgumentError(
            f"output mean {output_mean} must lie in [1, max_model_len - prompt mean = {big - prompt_mean})"
        )
    ks = np.arange(1, big, dtype=np.float64)

    def prompt_mean_of(mu: float) -> float:
        return float(ks @ _prompt_pmf(mu, prompt_sigma, big - 1))

    mu_p = _bisect_mu(prompt_mean_of, prompt_mean, prompt_sigma)
    pmf_p = _prompt_pmf(mu_p, prompt_sigma, big - 1)
    caps = big - np.arange(1, big)  # output cap for prompt 1..L-1

    def output_mean_of(mu: float) -> float:
        # survival[k] = P(max(rint(Y), 1) > k) for k = 0..L-1: 1 at k = 0, else 1 - F(k + 0.5).
        survival = np.concatenate([[1.0], 1.0 - _lognormal_cdf(np.arange(1, big) + 0.5, mu, output_sigma)])
        e_min = np.cumsum(survival)  # e_min[c-1] = E[min(.., c)]
        return float(pmf_p @ e_min[caps - 1])

    return mu_p, _bisect_mu(output_mean_of, output_mean, output_sigma)


def _need(params: Mapping[str, Any], kind: str, key: str) -> Any:
    if key not in params:
        raise InvalidArgumentError(f"lengths={kind!r} needs length_params[{key!r}]")
    return params[key]


# The most tokens a drawn prompt or output may have (far past any model's context; an int64 holds it).
MAX_TOKENS = 1 << 40


def _tokens(name: str, value: Any) -> int:
    """A token count given as a number: an integer, or a float of an integer's value (`4000.0`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} {value!r} must be a whole number of tokens")
    if not (isinstance(value, numbers.Integral) or (math.isfinite(value) and float(value).is_integer())):
        raise InvalidArgumentError(f"{name} {value!r} must be a whole number of tokens")
    v = int(float(value)) if not isinstance(value, numbers.Integral) else int(value)
    if v > MAX_TOKENS:
        raise InvalidArgumentError(f"{name} {v} is more than {MAX_TOKENS:,} tokens")
    return v


# At most this many distinct system prompts (a table of their lengths and ids is made whole).
MAX_SYSTEM_PROMPTS = 1 << 20


def _real(name: str, value: Any) -> float:
    """`value` as a float: a number (numpy's too), not a bool or text (its domain checked by the caller)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} {value!r} must be a number")
    try:
        return float(value)
    except OverflowError:  # an int past a float's range
        raise InvalidArgumentError(f"{name} {value} is out of range") from None


def _system_prompt_lens(value: Any, count: int) -> np.ndarray:
    """`system_prompt_len` as one length per system prompt: one integer for all, or `count` of them."""
    items = (
        list(value) if isinstance(value, Sequence | np.ndarray) and not isinstance(value, str) else [value]
    )
    lens = [int_arg("system_prompt_len", v) for v in items]
    if len(lens) not in (1, count):
        raise InvalidArgumentError(
            f"system_prompt_len gives {len(lens)} lengths for num_system_prompts {count}: give one for all or "
            f"one per prompt"
        )
    if any(not 0 <= v <= MAX_TOKENS for v in lens):
        raise InvalidArgumentError(f"system_prompt_len {value} must lie in [0, {MAX_TOKENS:,}]")
    return np.array(lens * count if len(lens) == 1 else lens, dtype=np.int64)


def _check_clock(
    arrivals: str, rate: float, starts: Any, arrival: Any, turns: int, turn_interval: Any
) -> None:
    """Refuses arrivals past the simulated clock's range (`MAX_TIME_PS`, about 53 days), naming the
    parameter that put them there: a rate so low that the gaps alone pass it (`arrival_rate`), else the
    turns' spacing (`turn_interval`). Until 2026-12-07 the engine's input refused such a workload as a
    trace's ("row N: arrival ... s is past the simulated clock's range: rebase the timestamps"), naming
    no parameter (`--grid workload.arrival_rate=1e-300`, adv47 B4)."""
    from kvsim.model.knob_table import MAX_TIME_PS, PS_PER_S

    if not len(arrival) or float(arrival.max()) * PS_PER_S < MAX_TIME_PS:
        return
    last = float(arrival.max())
    if arrivals != "all-at-once" and float(starts.max()) * PS_PER_S >= MAX_TIME_PS:
        raise InvalidArgumentError(
            f"arrival_rate {rate:g} requests/s puts the last arrival at {last:.4g} s, past the simulated "
            "clock's range (about 53 days): give a higher arrival_rate, or fewer requests"
        )
    raise InvalidArgumentError(
        f"turn_interval {float(turn_interval):g} s over {turns} turns puts the last arrival at {last:.4g} s, "
        "past the simulated clock's range (about 53 days): give a shorter turn_interval, or fewer turns"
    )


def _positive(name: str, value: Any) -> float:
    """`value` as a finite float > 0: a number (numpy's too), not a bool or text."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} {value!r} must be a positive and finite number")
    try:
        v = float(value)
    except OverflowError:  # an int past a float's range
        raise InvalidArgumentError(f"{name} {value} must be positive and finite") from None
    if not math.isfinite(v) or v <= 0:
        raise InvalidArgumentError(f"{name} {value} must be positive and finite")
    return v


def _read_pairs(
    path: Path, prompt_column: str | None, output_column: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """Reads (prompt, output) length columns from a csv, jsonl or parquet file (`read_length_pairs`:
    a bad value is a `TraceFormatError` naming the file, row and field)."""
    if not path.exists():
        raise InvalidArgumentError(
            f"length file {path} does not exist (set KVSIM_TRACES or pass length_params['path'])"
        )
    return read_length_pairs(path, prompt_column, output_column, _EMPIRICAL_COLUMNS)


def _draw_lengths(
    kind: str, params: Mapping[str, Any], n: int, max_model_len: int | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`n` (prompt, output) length pairs; see the module docstring for each kind."""
    if kind not in LENGTH_KINDS:
        raise InvalidArgumentError(f"lengths {kind!r} is not one of {LENGTH_KINDS}")
    unknown = sorted(set(params) - set(LENGTH_PARAMS[kind]))
    if unknown:
        named = ", ".join(map(repr, unknown))
        if not LENGTH_PARAMS[kind]:
            raise InvalidArgumentError(
                f"lengths={kind!r} takes no length_params (the preset sets its lengths), not {named}"
            )
        raise InvalidArgumentError(f"lengths={kind!r} takes length_params {LENGTH_PARAMS[kind]}, not {named}")
    if kind in PAPER_PRESETS or kind == "lognormal":
        if kind in PAPER_PRESETS:
            pm, om = PAPER_PRESETS[kind]
            ps, os_ = PAPER_SIGMA_PROMPT, PAPER_SIGMA_OUTPUT
        else:
            pm = _positive("prompt_mean", _need(params, kind, "prompt_mean"))
            om = _positive("output_mean", _need(params, kind, "output_mean"))
            ps = _positive("prompt_sigma", _need(params, kind, "prompt_sigma"))
            os_ = _positive("output_sigma", _need(params, kind, "output_sigma"))
        if max_model_len is not None:
            mu_p, mu_o = calibrated_mus(pm, ps, om, os_, max_model_len)
        else:
            mu_p, mu_o = math.log(pm) - ps * ps / 2, math.log(om) - os_ * os_ / 2
        prompt = np.rint(rng.lognormal(mu_p, ps, n))
        output = np.rint(rng.lognormal(mu_o, os_, n))
    elif kind == "normal":
        pm = _positive("prompt_mean", _need(params, kind, "prompt_mean"))
        om = _positive("output_mean", _need(params, kind, "output_mean"))
        ps = _positive("prompt_std", _need(params, kind, "prompt_std"))
        os_ = _positive("output_std", _need(params, kind, "output_std"))
        prompt = np.rint(rng.normal(pm, ps, n))
        output = np.rint(rng.normal(om, os_, n))
    elif kind == "fixed":
        p, o = (_tokens(k, _need(params, kind, k)) for k in ("prompt_len", "output_len"))
        if p < 1 or o < 1:
            raise InvalidArgumentError(f"fixed lengths must be >= 1, got prompt_len {p}, output_len {o}")
        prompt = np.full(n, p, dtype=np.float64)
        output = np.full(n, o, dtype=np.float64)
    elif kind == "uniform":
        ranges = []
        for key in ("prompt_len", "output_len"):
            pair = _need(params, kind, key)
            if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise InvalidArgumentError(f"uniform {key} {pair!r} must be a range (lo, hi)")
            lo, hi = (_tokens(key, v) for v in pair)
            if not 1 <= lo <= hi:
                raise InvalidArgumentError(f"uniform {key} range ({lo}, {hi}) needs 1 <= lo <= hi")
            ranges.append((lo, hi))
        prompt = rng.integers(ranges[0][0], ranges[0][1], n, endpoint=True).astype(np.float64)
        output = rng.integers(ranges[1][0], ranges[1][1], n, endpoint=True).astype(np.float64)
    else:  # sharegpt-real, empirical: resample whole pairs, keeping their correlation
        if kind == "sharegpt-real":
            path = Path(params["path"]) if "path" in params else traces_dir() / SHAREGPT_FILE
            pool_p, pool_o = _read_pairs(path, "num_prefill_tokens", "num_decode_tokens")
        else:
            pool_p, pool_o = _read_pairs(
                Path(_need(params, kind, "path")), params.get("prompt_column"), params.get("output_column")
            )
        pick = rng.integers(0, len(pool_p), n)
        prompt = pool_p[pick].astype(np.float64)
        output = pool_o[pick].astype(np.float64)
    for name, drawn in (("prompt_len", prompt), ("output_len", output)):
        if len(drawn) and not drawn.max() <= MAX_TOKENS:  # (a float's NaN or 1e30 too)
            raise InvalidArgumentError(
                f"lengths {kind!r} draws {name} {drawn.max():.4g}, more than {MAX_TOKENS:,} tokens"
            )
    if max_model_len is None:
        prompt = np.maximum(prompt, 1)
        output = np.maximum(output, 1)
    else:
        prompt = np.clip(prompt, 1, max_model_len - 1)
        output = np.clip(output, 1, max_model_len - prompt)
    return prompt.astype(np.int64), output.astype(np.int64)


def _draw_gaps(kind: str, n: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of `n` events starting at 0."""
    if kind not in ARRIVAL_KINDS:
        raise InvalidArgumentError(f"arrivals {kind!r} is not one of {ARRIVAL_KINDS}")
    times = np.zeros(n, dtype=np.float64)
    if n <= 1 or kind == "all-at-once":
        return times
    if kind == "poisson":
        gaps = rng.exponential(1.0 / rate, n - 1)
    elif kind == "gamma":
        shape = 1.0 / (burstiness * burstiness)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n - 1)
    else:
        gaps = np.full(n - 1, 1.0 / rate)
    np.cumsum(gaps, out=times[1:])
    return times


def _max_tokens(policy: Any, output: np.ndarray) -> np.ndarray:
    if isinstance(policy, str):
        if policy != "exact":
            raise InvalidArgumentError(
                f"max_tokens {policy!r}: use 'exact', an int, ('fixed', cap) or ('multiple', f)"
            )
        return output.copy()
    if isinstance(policy, int | np.integer) and not isinstance(policy, bool):
        policy = ("fixed", int(policy))
    if not (isinstance(policy, tuple) and len(policy) == 2 and policy[0] in ("fixed", "multiple")):
        raise InvalidArgumentError(
            f"max_tokens {policy!r}: use 'exact', an int, ('fixed', cap) or ('multiple', f)"
        )
    kind, value = policy
    if kind == "fixed":
        if int(value) != value or value < 1:
            raise InvalidArgumentError(f"max_tokens cap {value} must be an integer >= 1")
        return np.full(len(output), int(value), dtype=np.int64)
    factor = _positive("max_tokens multiple", value)
    return np.maximum(np.ceil(factor * output), 1).astype(np.int64)


# ------------------------------------------------------------------------------------------- public


def synthetic(
    num_requests: int,
    *,
    arrival_rate: float = 1.0,
    arrivals: str = "poisson",
    burstiness: float = 1.0,
    lengths: str = "sharegpt-paper",
    length_params: Mapping[str, Any] | None = None,
    max_model_len: int | None = None,
    num_system_prompts: int = 1,
    system_prompt_len: int | Sequence[int] = 0,
    sharing_ratio: float = 1.0,
    turns: int = 1,
    turn_interval: float = 30.0,
    num_samples: int = 1,
    beam_width: int | None = None,
    max_tokens: str | int | tuple[str, float] = "exact",
    first_request_id: int = 0,
    seed: int = 0,
) -> Workload:
    """A synthetic request table; the module docstring describes every option.

    Args:
        num_requests: rows in the table (>= 0).
        arrival_rate: requests per second overall (> 0; unused by `all-at-once`).
        arrivals: `poisson`, `gamma`, `constant` or `all-at-once`.
        burstiness: coefficient of variation of the gaps for `gamma` (> 0; 1 is Poisson); another
            value with other `arrivals`, which never read it, is refused.
        lengths: a length preset or distribution (see the table above).
        length_params: that distribution's parameters.
        max_model_len: clip per-turn lengths so prompt + output <= this; None takes the preset's default
            (2048 for the paper presets, no clipping otherwise).
        num_system_prompts: distinct shared system prompts (>= 1); another value than 1 without system
            prompts (`system_prompt_len` 0), which never reads it, is refused.
        system_prompt_len: their length in tokens, one int for all or one per prompt; 0 disables them.
        sharing_ratio: fraction of conversations that start with a system prompt, in [0, 1]; another
            value than 1 without system prompts is refused.
        turns: turns per conversation (>= 1).
        turn_interval: seconds between a conversation's turns (>= 0); another value than 30 with one
            turn, which never reads it, is refused.
        num_samples: parallel samples per request (>= 1).
        beam_width: beam width (>= 1), stored as `num_samples` with `beam` set; excludes `num_samples`.
        max_tokens: `"exact"`, an int cap, `("fixed", cap)` or `("multiple", f)`.
        first_request_id: request ids are `first_request_id + row` (rows sorted by arrival).
        seed: seeds numpy's PCG64 through `SeedSequence(seed)`.

    Returns:
        The table; `meta` records the options and the seed.

    Raises:
        InvalidArgumentError: an option out of its domain (the message names it and its value).
    """
    n = int_arg("num_requests", num_requests)
    if n < 0:
        raise InvalidArgumentError(f"num_requests {num_requests} must not be negative")
    for name, kind, kinds in (("arrivals", arrivals, ARRIVAL_KINDS), ("lengths", lengths, LENGTH_KINDS)):
        if not isinstance(kind, str) or kind not in kinds:
            raise InvalidArgumentError(f"{name} {kind!r} is not one of {kinds}")
    turns = int_arg("turns", turns)
    num_system_prompts = int_arg("num_system_prompts", num_system_prompts)
    num_samples = int_arg("num_samples", num_samples)
    first_request_id = int_arg("first_request_id", first_request_id)
    seed = int_arg("seed", seed)
    if seed < 0:
        raise InvalidArgumentError(f"seed {seed} must not be negative (numpy's SeedSequence takes no sign)")
    if beam_width is not None:
        beam_width = int_arg("beam_width", beam_width)
    if max_model_len is not None:
        max_model_len = int_arg("max_model_len", max_model_len)
    turn_interval = _real("turn_interval", turn_interval)
    sharing_ratio = _real("sharing_ratio", sharing_ratio)
    if num_system_prompts > MAX_SYSTEM_PROMPTS:
        raise InvalidArgumentError(
            f"num_system_prompts {num_system_prompts} must be at most {MAX_SYSTEM_PROMPTS:,}"
        )
    if turns > 1 << 40:
        raise InvalidArgumentError(f"turns {turns} must be at most {1 << 40:,}")
    if arrivals != "all-at-once":
        arrival_rate = _positive("arrival_rate", arrival_rate)
    burstiness = _positive("burstiness", burstiness)
    if not 1e-100 <= burstiness <= 1e100:  # (gamma's shape 1 / burstiness² stays a finite float > 0)
        raise InvalidArgumentError(f"burstiness {burstiness:g} must lie in [1e-100, 1e100]")
    if arrivals in ARRIVAL_KINDS and arrivals != "gamma" and burstiness != 1.0:
        raise InvalidArgumentError(
            f"burstiness {burstiness:g} applies to arrivals 'gamma' only: arrivals {arrivals!r} never read it"
        )
    if turns < 1:
        raise InvalidArgumentError(f"turns {turns} must be at least 1")
    if not (math.isfinite(turn_interval) and turn_interval >= 0):
        raise InvalidArgumentError(f"turn_interval {turn_interval} must be finite and >= 0")
    if not 0.0 <= sharing_ratio <= 1.0:
        raise InvalidArgumentError(f"sharing_ratio {sharing_ratio} must lie in [0, 1]")
    if num_system_prompts < 1:
        raise InvalidArgumentError(f"num_system_prompts {num_system_prompts} must be at least 1")
    sys_lens = _system_prompt_lens(system_prompt_len, num_system_prompts)
    if (sys_lens < 0).any() or (np.ptp(sys_lens) > 0 and (sys_lens == 0).any()):
        raise InvalidArgumentError(f"system_prompt_len {system_prompt_len} must be all 0 (off) or all >= 1")
    # A parameter the table never reads here is refused, as burstiness without gamma is (user53 #10: a
    # sweep over sharing_ratio without system prompts drew one flat line, silently).
    if sys_lens[0] == 0:
        for name, value, default in (
            ("sharing_ratio", sharing_ratio, 1.0),
            ("num_system_prompts", num_system_prompts, 1),
        ):
            if value != default:
                raise InvalidArgumentError(
                    f"{name} {value:g} applies with system prompts only: system_prompt_len 0 (no system "
                    "prompt) never reads it; give system_prompt_len N for prompts of N shared tokens"
                )
    if turns == 1 and turn_interval != 30.0:
        raise InvalidArgumentError(
            f"turn_interval {turn_interval:g} applies to conversations of several turns only: turns 1 never "
            "reads it; give turns N"
        )
    if beam_width is not None:
        if num_samples != 1:
            raise InvalidArgumentError("give num_samples or beam_width, not both")
        if not 1 <= beam_width <= MAX_SAMPLES:
            raise InvalidArgumentError(f"beam_width {beam_width} must lie in [1, {MAX_SAMPLES}]")
    elif not 1 <= num_samples <= MAX_SAMPLES:
        raise InvalidArgumentError(f"num_samples {num_samples} must lie in [1, {MAX_SAMPLES}]")
    if first_request_id < 0 or first_request_id + n - 1 > MAX_REQUEST_ID:
        raise InvalidArgumentError(
            f"first_request_id {first_request_id} puts ids outside [0, {MAX_REQUEST_ID}]"
        )
    if max_model_len is None and lengths in PAPER_PRESETS:
        max_model_len = PAPER_MAX_MODEL_LEN
    if max_model_len is not None and max_model_len < 2:
        raise InvalidArgumentError(f"max_model_len {max_model_len} must be at least 2")

    rng_key, rng_arrival, rng_len, rng_share = (
        np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(seed).spawn(4)
    )
    key = int(rng_key.integers(0, 1 << 63, dtype=np.uint64))

    # Generation order is conversation-major: request j is turn j % turns of conversation j // turns.
    num_conv = -(-n // turns) if n else 0
    conv = np.arange(n, dtype=np.int64) // turns
    turn = np.arange(n, dtype=np.int64) - conv * turns
    starts = _draw_gaps(
        arrivals,
        num_conv,
        arrival_rate / turns if arrivals != "all-at-once" else 1.0,
        burstiness,
        rng_arrival,
    )
    arrival = starts[conv] + turn * float(turn_interval)
    _check_clock(arrivals, arrival_rate, starts, arrival, turns, turn_interval)
    message, output = _draw_lengths(lengths, length_params or {}, n, max_model_len, rng_len)
    cap = _max_tokens(max_tokens, output)

    # Final request ids follow arrival order (ties: generation order), which is the table's row order.
    order = np.argsort(arrival, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    request_id = (rank + first_request_id).astype(np.uint64)

    # Which conversations open with a system prompt, and which one.
    has_sys = np.zeros(num_conv, dtype=np.int64)
    if sys_lens[0] > 0 and num_conv:
        chosen = rng_share.permutation(num_conv)[: round(sharing_ratio * num_conv)]
        has_sys[chosen] = 1
    sys_choice = rng_share.integers(0, num_system_prompts, num_conv)

    # Each conversation's history H = [system?] msg_0 out_0 msg_1 out_1 ...; turn t's prompt is the
    # prefix of H that ends with msg_t, so every prompt is one contiguous range of H.
    conv_len = np.bincount(conv, minlength=num_conv).astype(np.int64) if n else np.zeros(0, np.int64)
    hist_size = has_sys + 2 * conv_len
    hist_start = np.zeros(num_conv + 1, dtype=np.int64)
    np.cumsum(hist_size, out=hist_start[1:])
    hist_id = np.empty(int(hist_start[-1]), dtype=np.uint64)
    hist_len = np.empty(int(hist_start[-1]), dtype=np.int64)
    sys_pos = hist_start[:-1][has_sys == 1]
    sys_ids = content_ids(key, 0, num_system_prompts)
    hist_id[sys_pos] = sys_ids[sys_choice[has_sys == 1]]
    hist_len[sys_pos] = sys_lens[sys_choice[has_sys == 1]]
    msg_pos = hist_start[:-1][conv] + has_sys[conv] + 2 * turn
    hist_id[msg_pos] = content_ids(key, num_system_prompts, n)
    hist_len[msg_pos] = message
    hist_id[msg_pos + 1] = np.uint64(OUTPUT_BIT) | (request_id << np.uint64(16))
    hist_len[msg_pos + 1] = np.minimum(output, cap)

    prompt_start = hist_start[:-1][conv]
    prompt_end = msg_pos + 1
    seg_offsets, segment_id, segment_len = _gather_ranges(prompt_start, prompt_end, hist_id, hist_len)

    beam = beam_width is not None
    samples = beam_width if beam_width is not None else num_samples
    meta = {
        "generator": "synthetic",
        "seed": seed,
        "num_requests": n,
        "arrival_rate": arrival_rate,
        "arrivals": arrivals,
        "burstiness": burstiness,
        "lengths": lengths,
        "length_params": {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in (length_params or {}).items()
        },
        "max_model_len": max_model_len,
        "num_system_prompts": num_system_prompts,
        "system_prompt_len": sys_lens.tolist(),
        "sharing_ratio": sharing_ratio,
        "turns": turns,
        "turn_interval": turn_interval,
        "num_samples": samples,
        "beam": beam,
        "max_tokens": list(max_tokens) if isinstance(max_tokens, tuple) else max_tokens,
    }
    cols = {
        "arrival": arrival,
        "output_len": output,
        "max_tokens": cap,
        "num_samples": np.full(n, samples, dtype=np.int64),
        "beam": np.full(n, beam, dtype=np.bool_),
        "request_id": request_id,
        "seg_offsets": seg_offsets,
        "segment_id": segment_id,
        "segment_len": segment_len,
    }
    return Workload._from_owned(cols, meta)


def _gather_ranges(start: np.ndarray, end: np.ndarray, *flats: np.ndarray) -> tuple[np.ndarray, ...]:
    """CSR rows made of the ranges `[start[r], end[r])` of the flat arrays (ranges may overlap)."""
    counts = end - start
    offsets = np.zeros(len(start) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    index = np.repeat(start - offsets[:-1], counts) + np.arange(int(offsets[-1]), dtype=np.int64)
    return (offsets, *(flat[index] for flat in flats))


__all__ = ["ARRIVAL_KINDS", "LENGTH_KINDS", "PAPER_PRESETS", "calibrated_mus", "synthetic", "traces_dir"]
