"""Card-tier shift: a whole tier's recent TTFT against its own history and the rest of the fleet.

Per-target p99 over five minutes is what the router's jitter term needs, but at a few
requests per second per target it reacts slowly to a tier-wide fault and is noisy. Here
every measured TTFT is divided by its own target's baseline (a slow geometric mean), and
each tier's median ratio over a short window (default 30 s) is compared with the median
ratio of the rest of the fleet over the same window (so fleet-wide load moves both and
cancels). A tier is one card type's targets serving one model, compared with the other
targets of that model (the whole rest of the fleet when they have too few samples): a
burst of one model's traffic lifts all of its targets, on every card, and cancels too. A
"tier" of fewer than `tier_min_targets` targets is a single target, the per-target
score's business.

A tier trips when its median is at least `tier_min_ratio` times the rest's and at least
`tier_min_ratio` times its own baseline (effect size: a tier that only looks slow because
the rest of the fleet got faster has not shifted) and the difference of the log medians
is at least `tier_z_threshold` standard errors (SE of a median = 1.2533 x sigma /
sqrt(n); each median on its own spread, sigma from its interquartile range floored at
ln(1 + `mad_floor_rel`), the tier's at most the rest's: the rest has many more samples,
and a tier as spread as the rest is judged as before): thin or heavy-tailed data needs a
larger shift before it counts. The tier's own log median must also be `tier_z_threshold`
standard errors from its baseline, on the tier's own spread (`z_own`): when the rest of
the fleet gets faster (prefix-cache hits), a tier whose median sits a little over
`tier_min_ratio` inside a wide spread of its own (an overloaded queue) is not slow; a 3x
slowdown moves the median far more than its spread. In the short window the tier's
spread is at most the long window's: a step inside the last 10 s puts the old and the
new TTFTs side by side and widens the short window's spread exactly when it should judge.

Like load with like, when the samples carry prompt lengths: the statistic is TTFT per
prompt token (`tier_statistic`), and a tier is excused while it is *loaded*: the prompt
tokens served by it over the window reached `tier_max_load_ratio` times their usual rate
(a slow EWMA of it), or those handed to it (at the routing decision, where a driver
feeds them) did while it still served at least 1 / `tier_max_load_ratio` of its usual
work. A learned router hands its fastest cards the long prompts and the bursts, and
their TTFT then rises with the work; a surge raises the handed work at once, even on a
saturated tier that cannot serve more (it serves about its usual work: its capacity); a
slow card is handed the same or less work (round-robin; the learned router moves load
away from it) and serves the same or less.
The excuse lasts a window after the last such reading (a backlog takes that long to
drain) and ends as soon as the handed and the served work are back below their usual
rate, unless the tier is working off the load's queue: answering, late, requests handed
to it during the excuse (`queued_load`) while serving at least 1 / `tier_max_load_ratio`
of what it is handed now (a queue worked down; a slowed tier under unchanged load serves
far less than it is handed, its queue grows). Then it stays loaded.
The served work is counted with each TTFT (at the first token where first tokens are
fed: the prefill is done), not the requests in flight: by Little's law a slower card
holds more requests in flight at the same arrival rate, so an in-flight count would
excuse the very slowdown it should expose.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from slaguard.guard.baseline import LogBaseline
from slaguard.guard.config import TtftZscoreConfig
from slaguard.guard.histogram import SlidingLogHistogram
from slaguard.guard.robust import log_floor, sigma_from_iqr
from slaguard.guard.sliding_sum import SlidingSum
from slaguard.guard.verdicts import Action, JsonDict, Severity, Verdict

_FLEET = "*"
_MEDIAN_SE = 1.2533


class WorkRate:
    """Prompt tokens per second per tier over the tier window, against the tier's usual
    rate (a slow EWMA of it, frozen while the tier is tripped)."""

    def __init__(self, config: TtftZscoreConfig) -> None:
        self.config = config
        self._sum = SlidingSum(config.slice_s, config.tier_slice_count)
        self._since: dict[tuple[str, str], float] = {}
        self._baselines: dict[tuple[str, str], LogBaseline] = {}

    def add(self, tier: tuple[str, str], at_s: float, prompt_tokens: int) -> None:
        self._sum.add(_key(tier), at_s, float(prompt_tokens))
        self._since.setdefault(tier, at_s)

    def reset(self) -> None:
        self._since = {}
        self._baselines = {}

    def ratio(self, tier: tuple[str, str], now_s: float, frozen: bool) -> float | None:
        """The window's rate against the usual one; None while the rate is unknown (no
        prompt lengths fed) or its baseline younger than a window. Each call folds the
        window's rate into the baseline (once per evaluation)."""
        since = self._since.get(tier)
        c = self.config
        if since is None or now_s - since < c.tier_window_s:
            return None
        rate = self._sum.total(_key(tier), now_s) / c.tier_window_s
        if rate <= 0:
            return None
        baseline = self._baselines.get(tier)
        if baseline is None:
            baseline = LogBaseline(c.baseline_tau_s, c.baseline_max_freeze_s)
            self._baselines[tier] = baseline
        ratio = baseline.ratio(rate) if baseline.age_s(now_s) >= c.tier_window_s else None
        baseline.update(now_s, rate, anomalous=frozen)
        return ratio


class TierShift:
    """Short-window median of baseline-normalised TTFT per (card type, model) vs the rest."""

    def __init__(self, config: TtftZscoreConfig, detector: str) -> None:
        self.config = config
        self.detector = detector
        c = config
        self._hist = SlidingLogHistogram(
            c.slice_s, c.tier_slice_count, c.relative_accuracy, c.min_ttft_s, c.max_ttft_s
        )
        self._members: dict[tuple[str, str], set[str]] = {}
        self._tripped: set[tuple[str, str]] = set()
        self._served = WorkRate(c)
        self._handed = WorkRate(c)
        self._loaded_until: dict[tuple[str, str], float] = {}
        self._queued_at: dict[tuple[str, str], float] = {}
        """The last first token of a request handed to the tier while it was loaded that
        waited at least a slice of the tier window for it: the load's queue."""
        self._load_ends: dict[tuple[str, str], float] = {}
        """The end of the tier's last load excuse by its readings, drained or not."""
        self.own_spreads: dict[tuple[str, str], float] = {}
        """Each judged tier's own log spread at the last evaluation (before any cap)."""

    def add(
        self,
        target_id: str,
        tier: tuple[str, str],
        at_s: float,
        ratio: float | None,
        prompt_tokens: int | None,
        queued: bool = False,
    ) -> None:
        """Fold in one baseline-normalised statistic (None while its target's baseline is
        young: the target still joins its tier); the prompt tokens (when known) count as
        the tier's served work."""
        if prompt_tokens is not None:
            self._served.add(tier, at_s, prompt_tokens)
        if queued:
            self._queued_at[tier] = max(at_s, self._queued_at.get(tier, -math.inf))
        self._members.setdefault(tier, set()).add(target_id)
        if ratio is not None:
            self._hist.add(_key(tier), at_s, ratio)
            self._hist.add(_key((_FLEET, tier[1])), at_s, ratio)
            self._hist.add(_FLEET, at_s, ratio)

    def add_handed(self, tier: tuple[str, str], at_s: float, prompt_tokens: int) -> None:
        """Count one request's prompt tokens as work handed to `tier` (at its routing)."""
        self._handed.add(tier, at_s, prompt_tokens)

    def tripped(self, tier: tuple[str, str]) -> bool:
        """Whether the last evaluation found `tier` shifted."""
        return tier in self._tripped

    def restart_handed(self) -> None:
        """Forget the handed work's baselines (what it counted stopped being comparable)."""
        self._handed.reset()

    def reset(self) -> None:
        """Forget trips and work history (the routing policy changed)."""
        self._tripped = set()
        self._served.reset()
        self._handed.reset()
        self._loaded_until = {}
        self._queued_at = {}
        self._load_ends = {}

    def queued_load(self, tier: tuple[str, str], at_s: float, arrived_s: float) -> bool:
        """Whether a first token at `at_s` answers the load's queue: a request handed to
        the tier within its last load excuse (up to its drain) that waited at least a
        slice for it."""
        return at_s - arrived_s >= self.config.slice_s and arrived_s < self._load_ends.get(
            tier, -math.inf
        )

    def _answering_queue(self, tier: tuple[str, str], now_s: float) -> bool:
        """Whether, within the last slice, the tier answered a request it was handed while
        loaded after that request waited at least a slice: the load's queue is not worked
        off yet."""
        return now_s - self._queued_at.get(tier, -math.inf) <= self.config.slice_s

    def _log_quantile(self, counts: np.ndarray, q: float) -> float:
        return math.log(self._hist.quantile_of(counts, q))

    def _log_spread(self, counts: np.ndarray) -> float:
        """Sigma of the log statistic from its interquartile range, floored."""
        iqr = self._log_quantile(counts, 0.75) - self._log_quantile(counts, 0.25)
        return max(sigma_from_iqr(iqr), log_floor(self.config.mad_floor_rel))

    def evaluate(
        self, now_s: float, spread_caps: Mapping[tuple[str, str], float] | None = None
    ) -> tuple[list[Verdict], JsonDict]:
        """Trip verdicts for tiers that shifted, and the evidence of every judged tier.

        `spread_caps`: each tier's own log spread over a longer window (that window's
        `own_spreads`). A step inside this window puts two populations side by side and
        widens its spread for as long as the window straddles the step; the longer window
        holds few of the new samples yet, so the smaller of the two is the tier's spread."""
        c = self.config
        self.own_spreads = {}
        self._hist.advance(now_s)
        fleet = self._hist.counts(_FLEET)
        tiers: JsonDict = {}
        tripped: set[tuple[str, str]] = set()
        for tier, members in sorted(self._members.items()):
            if len(members) < c.tier_min_targets:
                continue
            mine = self._hist.counts(_key(tier))
            rest, against = self._hist.counts(_key((_FLEET, tier[1]))) - mine, "model"
            if int(rest.sum()) < c.tier_min_samples:
                rest, against = fleet - mine, "fleet"
            n_mine, n_rest = int(mine.sum()), int(rest.sum())
            if min(n_mine, n_rest) < c.tier_min_samples:
                continue
            m_tier, m_rest = self._log_quantile(mine, 0.5), self._log_quantile(rest, 0.5)
            sigma, own_sigma = self._log_spread(rest), self._log_spread(mine)
            self.own_spreads[tier] = own_sigma
            if spread_caps is not None and tier in spread_caps:
                own_sigma = min(own_sigma, spread_caps[tier])
            tier_sigma = min(own_sigma, sigma)
            se = _MEDIAN_SE * math.sqrt(tier_sigma**2 / n_mine + sigma**2 / n_rest)
            ratio, own, z = math.exp(m_tier - m_rest), math.exp(m_tier), (m_tier - m_rest) / se
            z_own = m_tier / (_MEDIAN_SE * own_sigma / math.sqrt(n_mine))
            frozen = tier in self._tripped
            load = self._served.ratio(tier, now_s, frozen)
            handed = self._handed.ratio(tier, now_s, frozen)
            tiers[_key(tier)] = {
                "card_type": tier[0],
                "model": tier[1],
                "targets": len(members),
                "compared_with": against,
                "ratio_vs_rest": round(ratio, 4),
                "tier_ratio_to_baseline": round(own, 4),
                "rest_ratio_to_baseline": round(math.exp(m_rest), 4),
                "z": round(z, 3),
                "z_own": round(z_own, 3),
                "log_spread": round(own_sigma, 4),
                "rest_log_spread": round(sigma, 4),
                "samples": n_mine,
                "rest_samples": n_rest,
                "load_ratio_to_baseline": None if load is None else round(load, 4),
                "handed_ratio_to_baseline": None if handed is None else round(handed, 4),
            }
            working_off = self._answering_queue(tier, now_s) and (
                load is not None and (handed is None or load * c.tier_max_load_ratio >= handed)
            )
            known = [r for r in (load, handed) if r is not None]
            if load is not None and (
                load >= c.tier_max_load_ratio
                or (
                    handed is not None
                    and handed >= c.tier_max_load_ratio
                    and load * c.tier_max_load_ratio >= 1.0
                )
            ):
                self._loaded_until[tier] = self._load_ends[tier] = now_s + c.tier_window_s
            elif known and max(known) < 1.0 and not working_off and tier in self._loaded_until:
                # work back below usual, no queue of the load worked off: drained
                del self._loaded_until[tier]
                self._load_ends[tier] = now_s
            loaded = now_s < self._loaded_until.get(tier, -math.inf) or working_off
            tiers[_key(tier)] |= {"loaded": loaded, "working_off_queue": working_off}
            shifted = min(ratio, own) >= c.tier_min_ratio and min(z, z_own) >= c.tier_z_threshold
            if shifted and not loaded:
                tripped.add(tier)
        self._tripped = tripped
        evidence: JsonDict = {
            "tiers": tiers,
            "tier_window_s": c.tier_window_s,
            "tier_min_samples": c.tier_min_samples,
            "tier_min_targets": c.tier_min_targets,
            "tier_z_threshold": c.tier_z_threshold,
            "tier_min_ratio": c.tier_min_ratio,
            "tier_max_load_ratio": c.tier_max_load_ratio,
        }
        strongest: dict[str, JsonDict] = {}
        for tier in tripped:
            row = tiers[_key(tier)]
            if tier[0] not in strongest or row["z"] > strongest[tier[0]]["z"]:
                strongest[tier[0]] = row
        verdicts = [self._verdict(strongest[card], now_s, evidence) for card in sorted(strongest)]
        return verdicts, evidence

    def _verdict(self, tier: JsonDict, now_s: float, evidence: JsonDict) -> Verdict:
        c = self.config
        card = tier["card_type"]
        summary = (
            f"card tier {card} ({tier['model']}): median TTFT over the last {c.tier_window_s:g}s "
            f"is {tier['ratio_vs_rest']:.2f}x the rest of the {tier['compared_with']}'s and "
            f"{tier['tier_ratio_to_baseline']:.2f}x its own, each relative to its target's "
            f"baseline (>= {c.tier_min_ratio}), Z {tier['z']:.1f} against the rest and "
            f"{tier['z_own']:.1f} against its own (>= {c.tier_z_threshold})"
        )
        detail = tier | {k: v for k, v in evidence.items() if k != "tiers"}
        return Verdict(
            self.detector, Action.TRIP, f"card:{card}", Severity.CRITICAL, summary, now_s, detail
        )


class TierTest:
    """The tier test on its window and the short one (`fast_tier`) over one set of
    per-target baselines: a TTFT is normalised once, whichever windows judge it, and a
    target's baseline stops learning while either window finds its tier shifted."""

    def __init__(self, config: TtftZscoreConfig, detector: str) -> None:
        self.config = config
        fast = config.fast_tier()
        self.windows = (TierShift(config, detector),) + (
            () if fast is None else (TierShift(fast, detector),)
        )
        self._target_baselines: dict[str, LogBaseline] = {}

    def observe(
        self,
        target_id: str,
        card_type: str,
        model_id: str,
        at_s: float,
        ttft_s: float,
        prompt_tokens: int | None = None,
        arrived_s: float | None = None,
    ) -> None:
        """Normalise one TTFT statistic (see `tier_statistic`) by its target's baseline and
        hand it to every window. `arrived_s`: when the request was handed to its target
        (a window's load excuse holds while the tier answers, late, requests handed to
        it during that excuse: `TierShift.queued_load`)."""
        c = self.config
        tier = (card_type, model_id)
        baseline = self._target_baselines.get(target_id)
        if baseline is None:
            baseline = LogBaseline(c.baseline_tau_s, c.baseline_max_freeze_s)
            self._target_baselines[target_id] = baseline
        ratio = baseline.ratio(ttft_s) if baseline.count >= c.min_samples else None
        for window in self.windows:
            queued = arrived_s is not None and window.queued_load(tier, at_s, arrived_s)
            window.add(target_id, tier, at_s, ratio, prompt_tokens, queued)
        shifted = any(window.tripped(tier) for window in self.windows)
        baseline.update(at_s, ttft_s, anomalous=shifted)

    def observe_handed(
        self, card_type: str, model_id: str, at_s: float, prompt_tokens: int
    ) -> None:
        """One request routed to a target of (card type, model): its prompt tokens count as
        work handed to that tier, in every window."""
        for window in self.windows:
            window.add_handed((card_type, model_id), at_s, prompt_tokens)

    def restart_handed(self) -> None:
        """Every window's handed work starts its baselines again."""
        for window in self.windows:
            window.restart_handed()

    def evaluate(self, now_s: float) -> tuple[list[Verdict], JsonDict]:
        """Both windows: one verdict per card type (the long window's when both trip), the
        evidence of each (`tiers`, `fast_tiers`)."""
        verdicts: dict[str, Verdict] = {}
        evidence: JsonDict = {}
        caps = None
        for window, key in zip(self.windows, ("tiers", "fast_tiers"), strict=False):
            found, seen = window.evaluate(now_s, caps)
            caps = window.own_spreads
            evidence[key] = seen["tiers"]
            for verdict in found:
                verdicts.setdefault(verdict.subject, verdict)
        return list(verdicts.values()), evidence

    def rebaseline(self) -> None:
        """Forget the per-target baselines and each window's trips (the routing policy
        changed)."""
        self._target_baselines = {}
        for window in self.windows:
            window.reset()


def tier_statistic(ttft_s: float, prompt_tokens: int | None, floor_tokens: int) -> float:
    """What the tier test compares: TTFT per 1,000 prompt tokens when the prompt length is
    known, else plain TTFT. A learned router sends the long, prefill-heavy prompts to the
    fast cards, so in a burst of long prompts those cards' TTFT rises with the work they
    were handed; per prompt token it stays put, while a slower card is slower per token.
    Prompts shorter than `floor_tokens` count as that long: their TTFT is mostly fixed
    cost and queueing, and dividing by a handful of tokens would make it noise."""
    if prompt_tokens is None:
        return ttft_s
    return ttft_s * 1000.0 / max(prompt_tokens, floor_tokens)


def _key(tier: tuple[str, str]) -> str:
    return f"{tier[0]}/{tier[1]}"
