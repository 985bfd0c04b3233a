//! Routers (DESIGN.md §Cluster): which replica an arriving unit goes to, from what the router sees of
//! each replica at that instant. Names, tie rules and the order of floating-point operations follow
//! the cluster contract exactly, so the reference (`kvsim.reference.cluster`) picks the same replica.

use crate::{Result, invalid_arg};

/// The router names, as `RouterSpec::parse` reads them.
pub const ROUTERS: [&str; 6] = [
    "round-robin",
    "random",
    "least-loaded",
    "least-kv",
    "prefix-affinity",
    "weighted",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterKind {
    RoundRobin,
    Random,
    LeastLoaded,
    LeastKv,
    PrefixAffinity,
    Weighted,
}

impl RouterKind {
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "round-robin" => Self::RoundRobin,
            "random" => Self::Random,
            "least-loaded" => Self::LeastLoaded,
            "least-kv" => Self::LeastKv,
            "prefix-affinity" => Self::PrefixAffinity,
            "weighted" => Self::Weighted,
            other => invalid_arg!(
                "router '{other}' is not one of {}",
                ROUTERS.map(|r| format!("'{r}'")).join(", ")
            ),
        })
    }

    /// Whether the router reads the replicas' state (else the driver need not advance them to route).
    pub fn reads_state(self) -> bool {
        !matches!(self, Self::RoundRobin | Self::Random)
    }
}

/// How a router that reads state settles a tie among its best replicas (`router_tie_break`).
pub const TIE_BREAKS: [&str; 3] = ["random", "lowest", "round-robin"];

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TieBreak {
    /// One draw from the router's splitmix64 stream picks among the tied replicas (llm-d's max-score
    /// picker, SGLang's cache-aware router, Dynamo's KV router).
    #[default]
    Random,
    /// The lowest replica index (Vidur's and BLIS's least-loaded, kvsim before ties were drawn).
    Lowest,
    /// The first tied replica at or after `k mod N` in cyclic order, for the unit's 0-based count k
    /// (vLLM's data-parallel balancer, whose scan start advances by one per request).
    RoundRobin,
}

impl TieBreak {
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "random" => Self::Random,
            "lowest" => Self::Lowest,
            "round-robin" => Self::RoundRobin,
            other => invalid_arg!(
                "router_tie_break '{other}' is not one of {}",
                TIE_BREAKS.map(|r| format!("'{r}'")).join(", ")
            ),
        })
    }
}

/// The weighted router's scorer weights (`router_weights`), summed in this order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    pub prefix: f64,
    pub queue: f64,
    pub kv: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            prefix: 3.0,
            queue: 2.0,
            kv: 2.0,
        }
    }
}

impl Weights {
    /// Weights from `(name, weight)` pairs (absent names weigh 0); `None`: the defaults.
    pub fn parse(pairs: Option<&[(String, f64)]>) -> Result<Self> {
        let Some(pairs) = pairs else {
            return Ok(Self::default());
        };
        let mut w = Weights {
            prefix: 0.0,
            queue: 0.0,
            kv: 0.0,
        };
        for (name, value) in pairs {
            let slot = match name.as_str() {
                "prefix" => &mut w.prefix,
                "queue" => &mut w.queue,
                "kv" => &mut w.kv,
                other => invalid_arg!(
                    "router_weights: scorer '{other}' is not one of 'prefix', 'queue', 'kv'"
                ),
            };
            if !value.is_finite() || *value < 0.0 {
                invalid_arg!("router_weights['{name}'] {value} must be a finite number >= 0");
            }
            *slot = *value;
        }
        Ok(w)
    }
}

/// A router and its parameters (`kvsim.reference.cluster.RouterSpec`).
#[derive(Clone, Debug, PartialEq)]
pub struct RouterSpec {
    pub kind: RouterKind,
    /// `random`'s splitmix64 seed.
    pub seed: u64,
    /// The stale view's refresh period in picoseconds (0: the router reads exact state).
    pub refresh_ps: i64,
    /// `prefix-affinity`: a replica is eligible while load <= cap x (mean load + 1).
    pub prefix_load_cap: f64,
    pub weights: Weights,
    /// How a tie among the best replicas is settled (routers that read state).
    pub tie_break: TieBreak,
    /// The fleet's data-parallel groups: this many consecutive replicas step together (1: each apart;
    /// DESIGN.md §Data-parallel groups). Carried here as the fleet's other knobs are.
    pub dp_group: usize,
}

impl RouterSpec {
    /// Checks every parameter (whatever the router), naming the field and the value.
    pub fn new(
        name: &str,
        seed: u64,
        refresh_ps: i64,
        prefix_load_cap: f64,
        weights: Option<&[(String, f64)]>,
    ) -> Result<Self> {
        let kind = RouterKind::parse(name)?;
        if refresh_ps < 0 {
            invalid_arg!("router_refresh_ps {refresh_ps} must be >= 0");
        }
        if !prefix_load_cap.is_finite() || prefix_load_cap < 1.0 {
            invalid_arg!("prefix_load_cap {prefix_load_cap} must be a finite number >= 1");
        }
        Ok(RouterSpec {
            kind,
            seed,
            refresh_ps,
            prefix_load_cap,
            weights: Weights::parse(weights)?,
            tie_break: TieBreak::default(),
            dp_group: 1,
        })
    }

    /// `self` settling ties by `tie_break`.
    #[must_use]
    pub fn with_tie_break(self, tie_break: TieBreak) -> Self {
        RouterSpec { tie_break, ..self }
    }

    /// `self` with replicas stepping in data-parallel groups of `dp_group` (1: apart).
    #[must_use]
    pub fn with_dp_group(self, dp_group: usize) -> Self {
        RouterSpec { dp_group, ..self }
    }

    /// `name` with the defaults: seed 0, exact view, cap 1.5, the default weights, ties drawn.
    pub fn named(name: &str) -> Result<Self> {
        Self::new(name, 0, 0, 1.5, None)
    }
}

/// splitmix64 (Steele, Lea and Flood): `random`'s stream, one draw per unit; the routers that read
/// state draw from it only to settle a tie.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A replica in `0..n`: `(z * n) >> 64`.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// What the router sees of one replica for one unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    pub waiting: u64,
    pub running: u64,
    pub in_flight: u64,
    pub kv_used: u64,
    pub kv_total: u64,
    /// The unit's prompt: leading full blocks cached here, and the blocks a lookup may hit
    /// (`(prompt_len - 1) // block_size`, at this replica's block size).
    pub hit_blocks: u64,
    pub lookup_blocks: u64,
}

impl Signals {
    #[inline]
    pub fn load(&self) -> u64 {
        self.waiting + self.running + self.in_flight
    }

    /// `self` has a strictly lower utilisation than `o` (exact: cross-multiplied).
    fn less_utilised(&self, o: &Signals) -> bool {
        u128::from(self.kv_used) * u128::from(o.kv_total)
            < u128::from(o.kv_used) * u128::from(self.kv_total)
    }

    fn same_utilisation(&self, o: &Signals) -> bool {
        u128::from(self.kv_used) * u128::from(o.kv_total)
            == u128::from(o.kv_used) * u128::from(self.kv_total)
    }
}

/// The router's own state: units routed (round-robin), the random stream, and the tied replicas of
/// the unit being routed.
#[derive(Clone, Debug)]
pub struct Router {
    pub spec: RouterSpec,
    routed: u64,
    rng: SplitMix64,
    ties: Vec<usize>,
    scores: Vec<f64>,
}

impl Router {
    pub fn new(spec: RouterSpec) -> Self {
        let rng = SplitMix64(spec.seed);
        Router {
            spec,
            routed: 0,
            rng,
            ties: Vec::new(),
            scores: Vec::new(),
        }
    }

    /// The replica for the next unit among `n` (`views`: one per replica, read only by the routers
    /// that read state).
    pub fn pick(&mut self, n: usize, views: &[Signals]) -> usize {
        let k = self.routed;
        self.routed += 1;
        let ties = &mut self.ties;
        match self.spec.kind {
            RouterKind::RoundRobin => return (k % n as u64) as usize,
            RouterKind::Random => return self.rng.below(n),
            RouterKind::LeastLoaded => least_loaded_ties(views, ties),
            RouterKind::LeastKv => least_kv_ties(views, ties),
            RouterKind::PrefixAffinity => {
                prefix_affinity_ties(views, self.spec.prefix_load_cap, ties);
            }
            RouterKind::Weighted => {
                weighted_scores_into(views, &self.spec.weights, &mut self.scores);
                max_score_ties(&self.scores, ties);
            }
        }
        settle(&self.ties, self.spec.tie_break, &mut self.rng, k, n)
    }
}

/// One of the tied best replicas `ties` (in index order, never empty) among `n`, for the unit of
/// 0-based count `k`: the only one; else `ties[(z * t) >> 64]` for the next draw z of the router's
/// stream (`random`, t tied), the lowest (`lowest`), or the first at or after `k mod n` in cyclic order
/// (`round-robin`: the tied r of least `(r - k) mod n`).
pub fn settle(
    ties: &[usize],
    tie_break: TieBreak,
    rng: &mut SplitMix64,
    k: u64,
    n: usize,
) -> usize {
    match (ties.len(), tie_break) {
        (1, _) | (_, TieBreak::Lowest) => ties[0],
        (t, TieBreak::Random) => ties[rng.below(t)],
        (_, TieBreak::RoundRobin) => {
            let start = (k % n as u64) as usize;
            // `ties` ascends: the first at or after the start, else (wrapping) the first of all.
            ties.iter()
                .copied()
                .find(|&r| r >= start)
                .unwrap_or(ties[0])
        }
    }
}

/// Keeps in `ties` the replicas (in index order) whose key equals the least key under `better`
/// (`better(a, b)`: a is strictly better than b; `same(a, b)`: neither is).
fn best_by(
    n: usize,
    ties: &mut Vec<usize>,
    mut eligible: impl FnMut(usize) -> bool,
    mut better: impl FnMut(usize, usize) -> bool,
    mut same: impl FnMut(usize, usize) -> bool,
) {
    ties.clear();
    for r in 0..n {
        if !eligible(r) {
            continue;
        }
        match ties.first() {
            Some(&b) if better(b, r) => {}
            Some(&b) if same(r, b) => ties.push(r),
            _ => {
                ties.clear();
                ties.push(r);
            }
        }
    }
}

/// The replicas of least load.
pub fn least_loaded_ties(views: &[Signals], ties: &mut Vec<usize>) {
    let least = views.iter().map(Signals::load).min().unwrap_or(0);
    loaded_at(views, least, ties);
}

/// The replicas (in index order) whose load is `load`. Two passes, the least load first, then this one
/// with no branch a replica: each index is written at the end and kept if its load is `load` (the
/// router runs once a unit, over every replica; which ones tie changes from unit to unit).
fn loaded_at(views: &[Signals], load: u64, ties: &mut Vec<usize>) {
    ties.clear();
    ties.resize(views.len(), 0);
    let mut k = 0;
    for (r, v) in views.iter().enumerate() {
        ties[k] = r;
        k += usize::from(v.load() == load);
    }
    ties.truncate(k);
}

/// Argmin of load; ties: the lowest index.
pub fn least_loaded(views: &[Signals]) -> usize {
    let mut ties = Vec::new();
    least_loaded_ties(views, &mut ties);
    ties[0]
}

/// The replicas of least utilisation (exact), and among those of least load.
pub fn least_kv_ties(views: &[Signals], ties: &mut Vec<usize>) {
    best_by(
        views.len(),
        ties,
        |_| true,
        |a, b| {
            let (a, b) = (&views[a], &views[b]);
            a.less_utilised(b) || (a.same_utilisation(b) && a.load() < b.load())
        },
        |a, b| {
            let (a, b) = (&views[a], &views[b]);
            a.same_utilisation(b) && a.load() == b.load()
        },
    );
}

/// Argmin of utilisation (exact); ties: lower load, then the lowest index.
pub fn least_kv(views: &[Signals]) -> usize {
    let mut ties = Vec::new();
    least_kv_ties(views, &mut ties);
    ties[0]
}

/// Among the replicas whose load is at most `cap` x (mean load + 1) (in f64:
/// `load * n <= cap * (total + n)`), those of the most cached leading blocks, and among those of least
/// load. The least-loaded replica is always eligible (its load is at most the mean).
pub fn prefix_affinity_ties(views: &[Signals], cap: f64, ties: &mut Vec<usize>) {
    let n = views.len() as u64;
    let (mut total, mut least, mut hit) = (0u64, u64::MAX, false);
    for v in views {
        let l = v.load();
        total += l;
        least = least.min(l);
        hit |= v.hit_blocks != 0;
    }
    if !hit {
        // No replica holds a block of the prompt: the best are the eligible ones of least load, which
        // are those of least load overall (each is eligible: its load is at most the mean, and cap
        // >= 1 keeps it so in f64), with no eligibility test to make.
        loaded_at(views, least, ties);
        return;
    }
    let bound = cap * (total + n) as f64;
    // `best_by` in one pass that reads each view once (the router runs once a unit, over every
    // replica): the best so far is (most hits, least load).
    ties.clear();
    let (mut hits, mut load) = (0u64, u64::MAX);
    for (r, v) in views.iter().enumerate() {
        let l = v.load();
        if (l * n) as f64 > bound {
            continue;
        }
        let h = v.hit_blocks;
        if ties.is_empty() || h > hits || (h == hits && l < load) {
            ties.clear();
            (hits, load) = (h, l);
        } else if h != hits || l != load {
            continue;
        }
        ties.push(r);
    }
    if ties.is_empty() {
        // Unreachable in exact arithmetic and in f64 (cap >= 1); never an empty pick.
        least_loaded_ties(views, ties);
    }
}

/// `prefix_affinity_ties`' first: ties go to the lowest index.
pub fn prefix_affinity(views: &[Signals], cap: f64) -> usize {
    let mut ties = Vec::new();
    prefix_affinity_ties(views, cap, &mut ties);
    ties[0]
}

/// The weighted router's score of each replica: `w_prefix * prefix + w_queue * queue + w_kv * kv`, in
/// that order, in f64.
pub fn weighted_scores(views: &[Signals], w: &Weights) -> Vec<f64> {
    let mut out = Vec::new();
    weighted_scores_into(views, w, &mut out);
    out
}

/// `weighted_scores` into `out` (cleared first).
pub fn weighted_scores_into(views: &[Signals], w: &Weights, out: &mut Vec<f64>) {
    let max = views.iter().map(Signals::load).max().unwrap_or(0);
    let min = views.iter().map(Signals::load).min().unwrap_or(0);
    out.clear();
    out.extend(views.iter().map(|v| {
        let prefix = if v.lookup_blocks == 0 {
            0.0
        } else {
            v.hit_blocks as f64 / v.lookup_blocks as f64
        };
        let queue = if max == min {
            1.0
        } else {
            (max - v.load()) as f64 / (max - min) as f64
        };
        let kv = 1.0 - v.kv_used as f64 / v.kv_total as f64;
        w.prefix * prefix + w.queue * queue + w.kv * kv
    }));
}

/// The replicas of the highest score (exactly equal f64s tie; all-zero weights tie every replica).
pub fn max_score_ties(scores: &[f64], ties: &mut Vec<usize>) {
    best_by(
        scores.len(),
        ties,
        |_| true,
        |a, b| scores[a] > scores[b],
        // Exactly equal scores tie (the contract compares f64s exactly, as the reference does).
        #[allow(clippy::float_cmp)]
        |a, b| scores[a] == scores[b],
    );
}

/// Argmax of `weighted_scores`; ties: the lowest index.
pub fn weighted(views: &[Signals], w: &Weights) -> usize {
    let mut ties = Vec::new();
    max_score_ties(&weighted_scores(views, w), &mut ties);
    ties[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(waiting: u64, kv_used: u64, kv_total: u64, hit: u64, lookup: u64) -> Signals {
        Signals {
            waiting,
            kv_used,
            kv_total,
            hit_blocks: hit,
            lookup_blocks: lookup,
            ..Signals::default()
        }
    }

    #[test]
    fn splitmix64_matches_its_published_stream() {
        // The first outputs for seed 0 (the reference values of Vigna's splitmix64.c).
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
        let mut r = SplitMix64(0);
        // (z * 4) >> 64 is the top two bits of z: 0xE2.. -> 3, 0x6E.. -> 1, 0x06.. -> 0.
        assert_eq!([r.below(4), r.below(4), r.below(4)], [3, 1, 0]);
    }

    #[test]
    fn round_robin_cycles_and_least_loaded_breaks_ties_low() {
        let mut rr = Router::new(RouterSpec::named("round-robin").unwrap());
        let picks: Vec<usize> = (0..5).map(|_| rr.pick(3, &[])).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1]);
        let views = [sig(3, 0, 1, 0, 0), sig(1, 0, 1, 0, 0), sig(1, 0, 1, 0, 0)];
        assert_eq!(least_loaded(&views), 1);
        let in_flight = Signals {
            in_flight: 5,
            ..Signals::default()
        };
        assert_eq!(least_loaded(&[in_flight, sig(4, 0, 1, 0, 0)]), 1);
    }

    #[test]
    fn least_kv_compares_utilisation_exactly_then_load() {
        // 1/3 < 2/5; equal utilisation 2/4 = 1/2: the lower load wins, then the lower index.
        assert_eq!(least_kv(&[sig(0, 2, 5, 0, 0), sig(9, 1, 3, 0, 0)]), 1);
        assert_eq!(least_kv(&[sig(2, 2, 4, 0, 0), sig(1, 1, 2, 0, 0)]), 1);
        assert_eq!(least_kv(&[sig(1, 2, 4, 0, 0), sig(1, 1, 2, 0, 0)]), 0);
    }

    #[test]
    fn prefix_affinity_prefers_hits_within_the_load_cap() {
        // Loads 6, 0, 0 (mean 2): cap 1.5 allows load <= 1.5 x 3 = 4.5, so replica 0's 5 hits are out
        // of reach and the tie at 2 hits goes to the lower load (replica 2 has load 0 as well: index).
        let views = [sig(6, 0, 1, 5, 8), sig(0, 0, 1, 2, 8), sig(0, 0, 1, 2, 8)];
        assert_eq!(prefix_affinity(&views, 1.5), 1);
        // A cap of 3 (load <= 9) lets the hot replica take it.
        assert_eq!(prefix_affinity(&views, 3.0), 0);
        // No hits anywhere: least loaded among the eligible.
        let cold = [sig(2, 0, 1, 0, 8), sig(1, 0, 1, 0, 8)];
        assert_eq!(prefix_affinity(&cold, 1.5), 1);
    }

    #[test]
    fn weighted_sums_the_scorers_in_order() {
        // Replica 0: prefix 1.0, queue 0.0 (the most loaded), kv 1 - 1/2; replica 1: prefix 0, queue 1,
        // kv 1 - 0: scores 3 + 0 + 1 = 4 against 0 + 2 + 2 = 4: a tie, the lower index.
        let views = [sig(2, 1, 2, 4, 4), sig(0, 0, 2, 0, 4)];
        let w = Weights::default();
        assert_eq!(weighted_scores(&views, &w), [4.0, 4.0]);
        assert_eq!(weighted(&views, &w), 0);
        let queue_only = Weights::parse(Some(&[("queue".into(), 1.0)])).unwrap();
        assert_eq!(weighted(&views, &queue_only), 1);
        // No full block to look up: prefix 0.0.
        assert_eq!(
            weighted_scores(&[sig(0, 0, 2, 0, 0)], &w),
            [3.0 * 0.0 + 2.0 + 2.0]
        );
    }

    #[test]
    fn each_router_finds_every_replica_tied_for_best() {
        let mut ties = Vec::new();
        let loads = [2, 1, 1, 3, 1].map(|w| sig(w, 0, 1, 0, 0));
        least_loaded_ties(&loads, &mut ties);
        assert_eq!(ties, [1, 2, 4]);
        // least-kv: 1/2 = 2/4 (exact) at the same load tie; 1/3 is lower but the load breaks 2/4 vs 1/2.
        least_kv_ties(
            &[sig(1, 1, 2, 0, 0), sig(1, 2, 4, 0, 0), sig(2, 1, 2, 0, 0)],
            &mut ties,
        );
        assert_eq!(ties, [0, 1]);
        least_kv_ties(&[sig(1, 1, 2, 0, 0), sig(5, 1, 3, 0, 0)], &mut ties);
        assert_eq!(ties, [1]);
        // prefix-affinity: loads 6, 0, 0, 0 (cap 1.5: load <= 1.5 x 2.5), hits 5, 2, 2, 1: replica 0 is
        // out of reach, 1 and 2 tie on hits and load.
        let views = [
            sig(6, 0, 1, 5, 8),
            sig(0, 0, 1, 2, 8),
            sig(0, 0, 1, 2, 8),
            sig(0, 0, 1, 1, 8),
        ];
        prefix_affinity_ties(&views, 1.5, &mut ties);
        assert_eq!(ties, [1, 2]);
        // weighted: all-zero weights score every replica 0.0: all tie (they went to replica 0 before).
        let zero = Weights::parse(Some(&[("kv".into(), 0.0)])).unwrap();
        max_score_ties(&weighted_scores(&views, &zero), &mut ties);
        assert_eq!(ties, [0, 1, 2, 3]);
        max_score_ties(&[4.0, 4.0, 3.0, 4.0], &mut ties);
        assert_eq!(ties, [0, 1, 3]);
    }

    #[test]
    fn a_tie_is_settled_by_one_draw_or_the_lowest_index() {
        let ties = [1, 3, 4];
        let mut rng = SplitMix64(11);
        let z = SplitMix64(11).next_u64();
        let expect = ties[((u128::from(z) * 3) >> 64) as usize];
        assert_eq!(settle(&ties, TieBreak::Random, &mut rng, 0, 5), expect);
        assert_eq!(settle(&ties, TieBreak::Lowest, &mut rng, 0, 5), 1);
        // Round-robin: the first tied at or after k mod 5, wrapping: k = 0, 2, 4, 5 + 4, 7.
        let rr = |k| settle(&ties, TieBreak::RoundRobin, &mut SplitMix64(0), k, 5);
        assert_eq!([rr(0), rr(2), rr(4), rr(9), rr(7)], [1, 3, 4, 4, 3]);
        assert_eq!(settle(&[0, 2], TieBreak::RoundRobin, &mut rng, 3, 5), 0);
        // One replica: no draw (the stream is where one draw left it).
        let mut one = SplitMix64(11);
        assert_eq!(settle(&[2], TieBreak::Random, &mut one, 0, 5), 2);
        assert_eq!(one.0, SplitMix64(11).0);
        // Over many ties of four, each replica about a quarter.
        let mut counts = [0u32; 4];
        for _ in 0..4000 {
            counts[settle(&[0, 1, 2, 3], TieBreak::Random, &mut rng, 0, 4)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (900..1100).contains(&c)),
            "{counts:?}"
        );
        assert!(
            TieBreak::parse("first")
                .unwrap_err()
                .to_string()
                .contains("router_tie_break 'first'")
        );
    }

    #[test]
    fn bad_parameters_name_the_field_and_value() {
        let err = |r: Result<RouterSpec>| r.unwrap_err().to_string();
        assert!(err(RouterSpec::named("nearest")).contains("router 'nearest'"));
        assert!(err(RouterSpec::new("random", 0, -1, 1.5, None)).contains("router_refresh_ps -1"));
        assert!(err(RouterSpec::new("random", 0, 0, 0.5, None)).contains("prefix_load_cap 0.5"));
        assert!(
            err(RouterSpec::new("random", 0, 0, f64::NAN, None)).contains("prefix_load_cap NaN")
        );
        let bad = [("disk".to_string(), 1.0)];
        assert!(err(RouterSpec::new("weighted", 0, 0, 1.5, Some(&bad))).contains("'disk'"));
        let neg = [("kv".to_string(), -1.0)];
        assert!(
            err(RouterSpec::new("weighted", 0, 0, 1.5, Some(&neg)))
                .contains("router_weights['kv'] -1")
        );
    }

    /// The definition `prefix_affinity_ties` computes in one pass: eligible by the f64 test on each
    /// replica, best by (most hits, least load), ties in index order.
    fn prefix_affinity_by_definition(views: &[Signals], cap: f64) -> Vec<usize> {
        let n = views.len() as u64;
        let total: u64 = views.iter().map(Signals::load).sum();
        let bound = cap * (total + n) as f64;
        let key = |r: usize| (views[r].hit_blocks, std::cmp::Reverse(views[r].load()));
        let mut ties = Vec::new();
        best_by(
            views.len(),
            &mut ties,
            |r| (views[r].load() * n) as f64 <= bound,
            |a, b| key(a) > key(b),
            |a, b| key(a) == key(b),
        );
        ties
    }

    proptest::proptest! {
        #[test]
        fn least_loaded_in_one_pass_is_its_definition(
            loads in proptest::collection::vec((0u64..6, 0u64..6, 0u64..3), 1..20),
        ) {
            let views: Vec<Signals> = loads
                .iter()
                .map(|&(w, r, f)| Signals { waiting: w, running: r, in_flight: f, ..Signals::default() })
                .collect();
            let load = |r: usize| views[r].load();
            let mut want = Vec::new();
            best_by(views.len(), &mut want, |_| true, |a, b| load(a) < load(b), |a, b| load(a) == load(b));
            let mut ties = Vec::new();
            least_loaded_ties(&views, &mut ties);
            proptest::prop_assert_eq!(ties, want);
        }

        #[test]
        fn prefix_affinity_in_one_pass_is_its_definition(
            loads in proptest::collection::vec((0u64..40, 0u64..40, 0u64..4), 1..20),
            no_hits in proptest::bool::ANY,
            cap in proptest::prop_oneof![1.0f64..3.0, proptest::strategy::Just(1.0), proptest::strategy::Just(1e300)],
            scale in proptest::prop_oneof![proptest::strategy::Just(1u64), proptest::strategy::Just(1u64 << 40)],
        ) {
            let views: Vec<Signals> = loads
                .iter()
                .map(|&(w, r, h)| Signals {
                    waiting: w * scale,
                    running: r,
                    hit_blocks: if no_hits { 0 } else { h },
                    ..Signals::default()
                })
                .collect();
            let mut ties = Vec::new();
            prefix_affinity_ties(&views, cap, &mut ties);
            proptest::prop_assert_eq!(ties, prefix_affinity_by_definition(&views, cap));
        }
    }
}
