"""The capacity search's comparison (DESIGN.md §Capacity search): the best of a list of candidates
(`best_of`), one `kvsim.analysis.plan.plan` a candidate, ranked by the requests each sets aside (fewest
first: candidates judged on more requests first) and then by the rate each sustains at SLO."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kvsim.analysis.plan import plan
from kvsim.analysis.plan_search import SLO, PlanResult
from kvsim.errors import InvalidArgumentError, UnsplittableModelError


@dataclass(frozen=True)
class Candidate:
    """One option for `best_of`: a label, config changes (`SimConfig.replace`), and optionally its own
    probe (a router is a cluster probe's argument, not a config field)."""

    label: str
    changes: Mapping[str, Any] = field(default_factory=dict)
    probe: Callable[[Any, Any], Mapping[str, Any]] | None = None


@dataclass
class BestOf:
    """What `best_of` found: `table` (one row per candidate: `candidate`, `rate`, `status`, `monotone`,
    `probes`, `set_aside`: the requests its search set aside, rejected at every probe whatever the rate,
    `PlanResult.unservable`, `burst`: `PlanResult.burst`, `steady`: `PlanResult.steady`), ranked (`RANKING`): fewest requests set aside first, then the
    answers whose own run was not overloaded before those whose was (`burst`: a rate passed with the queue
    growing through the run, which the configuration does not sustain, is not set against rates served
    without a growing queue), then the highest rate at SLO (none, passing at no rate probed, below any
    rate), the refused last; ties keep the order given. A
    candidate that sets aside more requests is judged on fewer of them (a shorter `max_model_len`, a model
    of a shorter context), so it ranks below one that serves more, whatever its rate. `best` (the first
    ranked, None if it passed at no rate probed: then `served_best` names the first ranked that passed,
    which sets aside more requests), `tied` (the best and every candidate
    setting aside as many requests whose search cannot be told from the best's: it passed somewhere and
    failed at no rate up to the best's answer, so its knee may be as high, each known only within its
    bracket, the precision; the same rate is one such; ranked, those at one rate in the order given: more
    than one is a tie, which neither the ranking nor the order given decides), `bursts` (the candidates whose answer is a burst,
    `PlanResult.burst`: its own probe passed with the queue growing through the run, not a steady state;
    not those of status `burst`, whose answer is a steady pass below the burst, `PlanResult.burst_rate`,
    and which tie where their search reaches the best's answer), `unsteady`
    (the candidates whose answer is not a steady state, `PlanResult.steady` False: the bursts and those
    whose run was too short to reach one, whose rates are overstated but still rates), `unsure` (the
    candidates whose answer's verdicts rest on their sample, `PlanResult.outside_ci` False: a bound
    inside the 95 % interval of a decisive probe's percentile), `decided`
    (`best` unless tied or a burst), every searched candidate's `PlanResult` in `plans`, and the
    candidates whose configuration is refused (a tensor-parallel size vLLM cannot split the model over)
    with the reason in `refused` (status `refused` in the table, no rate, no plan)."""

    table: pl.DataFrame
    best: str | None
    plans: dict[str, PlanResult]
    refused: dict[str, str] = field(default_factory=dict)
    tied: list[str] = field(default_factory=list)
    served_best: str | None = None
    bursts: list[str] = field(default_factory=list)
    unsteady: list[str] = field(default_factory=list)
    unsure: list[str] = field(default_factory=list)

    @property
    def decided(self) -> str | None:
        """`best` where the searches decide it: None when it is tied with another (`tied`) or when its
        answer, or a tied one's, is a burst (`bursts`: a rate whose own run passed as one burst, not a
        steady state, which ranks nothing; a status `burst` answer is a steady pass and ranks);
        `kvsim plan --compare --json`'s `best`."""
        if self.best is None or len(self.tied) > 1 or set(self.tied or [self.best]) & set(self.bursts):
            return None
        return self.best


RANKING = (
    "fewest requests set aside first (a candidate judged on fewer requests ranks below, whatever its rate), "
    "then answers from runs that were not overloaded before those whose own run was (a rate passed with the "
    "queue growing, which the configuration does not sustain), then the highest rate at SLO (passing at no "
    "rate probed ranks below any rate); the refused last; candidates whose searches cannot be ordered (one "
    "failed at no rate up to the other's answer) tie"
)


def change_label(changes: Mapping[str, Any]) -> str:
    """A candidate's label from its changes, `block_size=16,policy=lru`; max_model_len -1 shown as given,
    `auto`."""
    return ",".join(f"{k}={'auto' if k == 'max_model_len' and v == -1 else v}" for k, v in changes.items())


def best_of(
    workload: Any,
    config: Any,
    slos: Mapping[str, Any] | Sequence[str | SLO] | str,
    candidates: Sequence[Candidate | Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
    **kwargs: Any,
) -> BestOf:
    """The candidate (block size, policy, router, ...) that sustains the highest rate under the SLOs among
    those that set aside the fewest requests: one `plan` per candidate (its probes in parallel), ranked by
    the requests set aside, then by the answer.

    Args:
        candidates: `Candidate`s, mappings of config changes (`[{"block_size": 8}, {"block_size": 16}]`,
            labelled by their text), or a mapping label -> changes.
        kwargs: `plan`'s keyword arguments (a candidate's own probe replaces `probe`).

    Raises:
        InvalidArgumentError: no candidates, two with one label, a bad change (from `SimConfig.replace`),
            every candidate's configuration refused as vLLM would (`UnsplittableModelError`: a
            tensor-parallel size the model cannot be split over; some refused are reported in `refused`),
            and as `plan`.
    """
    items: list[Candidate] = []
    if not isinstance(candidates, Mapping | Sequence):
        raise InvalidArgumentError(
            f"candidates {candidates!r} must be a list of Candidates or of config changes, or a mapping "
            "label -> changes"
        )
    if isinstance(candidates, Mapping):
        items = [Candidate(str(k), dict(v)) for k, v in candidates.items()]
    else:
        for c in candidates:
            if isinstance(c, Candidate):
                items.append(c)
            elif isinstance(c, Mapping):
                items.append(Candidate(change_label(c), dict(c)))
            else:
                raise InvalidArgumentError(f"candidate {c!r} is neither a Candidate nor a mapping of changes")
    if not items:
        raise InvalidArgumentError("best_of needs at least one candidate")
    labels = [c.label for c in items]
    if len(set(labels)) != len(labels):
        raise InvalidArgumentError(f"candidates repeat a label: {labels}")
    plans: dict[str, PlanResult] = {}
    refused: dict[str, str] = {}
    configs = {}
    for c in items:
        try:
            configs[c.label] = config.replace(**c.changes) if c.changes else config
        except UnsplittableModelError as exc:  # (any other bad change is the caller's error: raised)
            refused[c.label] = str(exc)
    if not configs:
        raise InvalidArgumentError(f"every candidate's configuration is refused: {refused}")
    for c in items:
        if c.label in refused:
            continue
        kw = dict(kwargs)
        if c.probe is not None:
            kw["probe"] = c.probe
        plans[c.label] = plan(workload, configs[c.label], slos, **kw)
    aside = {c: sum(plans[c].unservable.values()) for c in plans}
    table = pl.DataFrame(
        {
            "candidate": labels,
            "rate": [plans[c].value if c in plans else None for c in labels],
            "status": [plans[c].status if c in plans else "refused" for c in labels],
            "monotone": [plans[c].monotone if c in plans else None for c in labels],
            "probes": [plans[c].probes.height if c in plans else 0 for c in labels],
            "set_aside": [aside.get(c) for c in labels],
            "burst": [plans[c].burst if c in plans else None for c in labels],
            "steady": [plans[c].steady if c in plans else None for c in labels],
        },
        schema_overrides={
            "rate": pl.Float64,
            "monotone": pl.Boolean,
            "set_aside": pl.Int64,
            "burst": pl.Boolean,
            "steady": pl.Boolean,
        },
    )
    # (`RANKING`; the refused, with no count, last; an answer whose own run was overloaded, a rate the
    # configuration does not sustain, below the rates served without a growing queue: user audit 54
    # finding 16 had 1 replica's overloaded 8.543 req/s ranked above 2 replicas' steady 5.863)
    table = table.sort(
        [pl.col("set_aside"), pl.col("rate").is_null(), pl.col("burst").fill_null(False), pl.col("rate")],
        descending=[False, False, False, True],
        nulls_last=True,
        maintain_order=True,
    )
    best = table["candidate"][0] if table["rate"][0] is not None else None
    tied = []
    if best is not None:
        top, top_aside = plans[best].value, table["set_aside"][0]
        assert top is not None
        tied = [
            c
            for c, a in zip(table["candidate"], table["set_aside"], strict=True)
            if c in plans and a == top_aside and _reaches(plans[c], top)
        ]
    served = table.filter(pl.col("rate").is_not_null())
    served_best = best if best is not None else (served["candidate"][0] if served.height else None)
    # (status `burst`: `value` is a steady pass, the burst kept apart as `burst_rate`)
    bursts = [c for c in labels if c in plans and plans[c].burst]
    unsteady = [c for c in labels if c in plans and plans[c].steady is False]
    unsure = [c for c in labels if c in plans and plans[c].outside_ci is False]
    return BestOf(table, best, plans, refused, tied, served_best, bursts, unsteady, unsure)


def _reaches(result: PlanResult, top: float) -> bool:
    """Whether a candidate's search leaves its knee possibly at or above `top` (the best's answer): it
    passed somewhere (a rate) and failed at no rate up to `top` (its bracket's failing end above `top`, or
    none). The searches then cannot order the two (the knees are known only within their brackets, each
    within the precision): a tie. A burst (`PlanResult.burst_rate`, status `burst`) passed at every rate
    below its knee, the highest in a steady run being `value` or none: its sustained knee is known to lie
    nowhere below its bracket's failing end, so it reaches `top` as its failing end does."""
    if result.value is None and result.burst_rate is None:
        return False
    failing = result.bracket[1]
    return failing is None or failing > top


__all__ = ["RANKING", "BestOf", "Candidate", "best_of"]
