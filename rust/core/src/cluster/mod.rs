//! A fleet on one clock (DESIGN.md §Cluster): each arriving unit (a row, or a fork-cow parent with its
//! samples) goes to a router, which picks a replica from what it sees of the replicas at that instant;
//! every replica is the engine stepped to the arrival (`replica.rs`), so between arrivals each runs
//! its own steps, event skipping kept. The reference's twin is `kvsim.reference.cluster`.

pub mod dp;
pub mod pd;
pub mod replica;
pub mod router;

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::block_pool::IdHasher;
use crate::block_table::{BlockTable, div_bs};
use crate::engine::{
    Counters, EngineConfig, EngineInput, EngineOutput, OUTPUT_BIT, Policy, RouterReads,
    for_each_row_column, private_starts,
};
use crate::kv_groups::SharedKeys;
use crate::{BlockKey, KvError, Result, Segment, invalid_arg};
pub use replica::Replica;
pub use router::{Router, RouterKind, RouterSpec, Signals, SplitMix64, TieBreak, Weights};

/// A cluster run's result: every row's output columns in workload order (their `counters` unused),
/// the replica of each row, and each replica's counters.
#[derive(Debug, Default)]
pub struct ClusterOutput {
    pub out: EngineOutput,
    pub replica: Vec<i64>,
    pub counters: Vec<Counters>,
}

/// What a stale view holds of one replica, taken at the last refresh instant.
#[derive(Default)]
struct Snapshot {
    signals: Signals,
    keys: HashSet<BlockKey, BuildHasherDefault<IdHasher>>,
    /// Units routed to the replica since the snapshot.
    routed: u64,
}

/// Checks a cluster's configs against the workload as `Engine::new` checks one.
fn validate(inp: &EngineInput<'_>, cfgs: &[EngineConfig], dp_group: usize) -> Result<()> {
    if cfgs.is_empty() {
        invalid_arg!("configs: a cluster needs at least one replica, got 0");
    }
    if dp_group == 0 || cfgs.len() % dp_group != 0 {
        invalid_arg!(
            "dp_group {dp_group}: the {} replicas must form whole data-parallel groups (a divisor of the replica count, 1 for none)",
            cfgs.len()
        );
    }
    if dp_group > 1 && cfgs.iter().any(|c| c.tier.is_some()) {
        invalid_arg!(
            "dp_group {dp_group}: a CPU tier with data-parallel groups is not modelled (its stores lengthen and stall a rank's steps)"
        );
    }
    for (r, cfg) in cfgs.iter().enumerate() {
        cfg.validate().map_err(|e| in_replica(r, cfgs.len(), e))?;
    }
    inp.validate()?;
    if inp.has_forks() {
        for (r, cfg) in cfgs.iter().enumerate() {
            if cfg.policy != Policy::Vllm {
                invalid_arg!(
                    "replica {r}: sampling 'fork-cow' (rows with a fork_parent) applies to policy 'vllm'"
                );
            }
            if cfg.max_num_batched_tokens < cfg.max_num_seqs {
                invalid_arg!(
                    "replica {r}: sampling 'fork-cow' needs max_num_batched_tokens >= max_num_seqs (vLLM v0's rule), got max_num_batched_tokens {} < max_num_seqs {}",
                    cfg.max_num_batched_tokens,
                    cfg.max_num_seqs
                );
            }
        }
    }
    // The pools together must fit the memory limit, as one does.
    let total: u64 = cfgs.iter().map(|c| u64::from(c.num_blocks)).sum();
    if let Ok(total) = u32::try_from(total) {
        if cfgs.len() > 1 {
            crate::block_pool::check_pool_memory(total).map_err(|e| match e {
                KvError::InvalidArgument(m) => KvError::InvalidArgument(format!(
                    "configs: the {} replicas' pools together ({total} blocks) do not fit: {m}",
                    cfgs.len()
                )),
                other => other,
            })?;
        }
    } else {
        invalid_arg!(
            "configs: the replicas' pools hold {total} blocks in all, more than one machine's bookkeeping can address"
        );
    }
    Ok(())
}

/// A replica's config error, naming the replica when there are several.
fn in_replica(r: usize, n: usize, e: KvError) -> KvError {
    match e {
        KvError::InvalidArgument(m) if n > 1 => {
            KvError::InvalidArgument(format!("replica {r}: {m}"))
        }
        other => other,
    }
}

/// Ctrl-C, read at the `k`-th unit (from 1) of a loop over the units when `k` is a multiple of 1,024.
fn every_1024th(k: u64, cancel: &AtomicBool) -> Result<()> {
    if k.trailing_zeros() >= 10 && cancel.load(Ordering::Relaxed) {
        return Err(KvError::InvalidOperation("interrupted".into()));
    }
    Ok(())
}

/// The units of `inp`: each row that is not a fork-cow sample, with the samples right after it.
fn unit_end(inp: &EngineInput<'_>, i: usize) -> usize {
    let mut j = i + 1;
    while j < inp.len() && inp.fork_parent(j) == i as i64 {
        j += 1;
    }
    j
}

/// The driver's state between units: the replicas, the router's view of them, and the prompt keys of
/// the unit being routed (one list per block size among the replicas that cache prefixes).
struct Driver<'i> {
    inp: EngineInput<'i>,
    replicas: Vec<Replica>,
    /// Per workload row (empty unless deferred keys with some replica caching): see `private_starts`.
    private_from: Vec<u64>,
    /// The router reads prefix hits.
    wants_keys: bool,
    sizes: Vec<u64>,
    keys: Vec<Vec<BlockKey>>,
    segs: Vec<Segment>,
    /// A hybrid model's key chains of the unit's prompt, which every replica's lookup reads.
    hybrid_keys: SharedKeys,
    views: Vec<Signals>,
    snaps: Vec<Snapshot>,
    snap_at: Option<i64>,
    /// Leave a replica whose steps up to the arrival leave what the router reads as it is where it is
    /// (`Replica::quiet_through`; off only in tests, which check it changes nothing).
    lazy: bool,
    /// What the router reads besides the load.
    reads: RouterReads,
    /// Per replica: stepped since `views` last read its waiting, running and KV counts.
    moved: Vec<bool>,
    /// Per replica: what the router reads is now what it is at every instant up to this one (the
    /// replica's `quiet_through`, lowered by the rows pushed since).
    quiet_until: Vec<i64>,
    /// Replicas stepped by the exact view (the tests read it).
    advances: u64,
    /// Each replica's block size.
    block_size: Vec<u64>,
    /// Every view's `hit_blocks` is 0 (set while routing units without keys).
    hits_zero: bool,
    /// The replicas that run a hybrid model (their prefix hits are their lookups over their groups, looked up
    /// for every unit: `Replica::hybrid_hit_blocks`).
    hybrid_replicas: usize,
    /// The fleet's output columns, in workload order: rows done move here from their replica as it
    /// steps (`Replica::drain_done`), the rest at the end (`gather`).
    out: EngineOutput,
    /// Data-parallel groups (DESIGN.md §Data-parallel groups): a replica is advanced with its group.
    groups: Option<dp::Groups>,
}

/// How many rows ahead of the unit being routed the driver asks for the input's lines (`prefetch`).
const PREFETCH_AHEAD: usize = 16;

/// Asks the CPU to bring the line of `s[i]` into its caches (a hint; nothing if `i` is out of range or
/// the target has no such instruction).
#[inline]
fn prefetch<T>(s: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(x) = s.get(i) {
        // SAFETY: a prefetch reads nothing and faults on nothing; SSE is part of x86-64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                std::ptr::from_ref(x).cast::<i8>(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (s, i);
}

impl Driver<'_> {
    /// The lines of row `row` in the columns a push and the prompt's keys read (of `seg_offsets`, of
    /// the row `PREFETCH_AHEAD` further: the segments' line is found from it, fetched a turn before,
    /// with a real load): the fleet's input is
    /// read once, a row at a time, between the looks and the steps that fill the caches with the
    /// replicas' state, so the hardware's own stride prefetch loses track of it (each line of a column
    /// missed, on the way to memory, in `Replica::push`: perf's samples there sat on those loads).
    #[inline]
    fn prefetch_input(&self, row: usize) {
        let inp = &self.inp;
        prefetch(inp.arrival_ps, row);
        prefetch(inp.prompt_len, row);
        prefetch(inp.target, row);
        prefetch(inp.max_gen, row);
        prefetch(inp.output_seg, row);
        prefetch(inp.fork_parent, row);
        prefetch(inp.seg_offsets, row + PREFETCH_AHEAD);
        if let Some(&lo) = inp.seg_offsets.get(row) {
            prefetch(inp.segment_id, lo as usize);
            prefetch(inp.segment_len, lo as usize);
        }
        prefetch(&self.private_from, row);
    }

    /// The chained block keys of `row`'s prompt at every block size, for its lookup range; blocks at or
    /// past its private content cannot be in any map (no other prompt holds them) and are not hashed.
    fn hash_prompt(&mut self, row: usize) {
        let inp = &self.inp;
        let (lo, hi) = (
            inp.seg_offsets[row] as usize,
            inp.seg_offsets[row + 1] as usize,
        );
        self.segs.clear();
        self.segs
            .extend((lo..hi).map(|k| Segment::new(inp.segment_id[k], inp.segment_len[k] as u64)));
        self.hybrid_keys.reset();
        let prompt = inp.prompt_len[row] as u64;
        for (s, &bs) in self.sizes.iter().enumerate() {
            let limit = self.private_from.get(row).map_or(u64::MAX, |&p| p / bs);
            BlockTable::lookup_keys(bs, &self.segs, prompt, limit, &mut self.keys[s]);
        }
    }

    fn keys_of(&self, bs: u64) -> &[BlockKey] {
        self.sizes
            .binary_search(&bs)
            .map_or(&[][..], |s| self.keys[s].as_slice())
    }

    /// The exact view for `row`, arriving at `a`: every replica advanced to `a` (or vouching for what
    /// it would show there, `Replica::quiet_through`).
    fn read_exact(&mut self, row: usize, a: i64, cancel: &AtomicBool) -> Result<()> {
        let prompt = self.inp.prompt_len[row] as u64;
        // A unit with no key to look up (the router reads no prefix, or no full block of its prompt
        // comes before its private content) hits 0 blocks everywhere, and its lookup size is then
        // unread (no hit scores 0 whatever it is): a replica vouched for up to `a` is not looked at.
        // (a hybrid model's lookup hashes at its groups' block sizes: always looked at)
        let hits = self.wants_keys
            && (self.hybrid_replicas > 0 || self.keys.iter().any(|k| !k.is_empty()));
        if !hits && !self.hits_zero {
            for v in &mut self.views {
                v.hit_blocks = 0;
            }
        }
        self.hits_zero = !hits;
        if hits || !self.lazy {
            for r in 0..self.replicas.len() {
                self.look_at(r, a, prompt, hits, cancel)?;
            }
            return Ok(());
        }
        // Only the replicas whose vouch ends before `a`, found without a branch a replica (which one
        // it is changes from unit to unit: a branch each would be mispredicted).
        for lo in (0..self.replicas.len()).step_by(64) {
            let mut due = 0u64;
            for (j, &q) in self.quiet_until[lo..].iter().take(64).enumerate() {
                due |= u64::from(a > q) << j;
            }
            while due != 0 {
                self.look_at(lo + due.trailing_zeros() as usize, a, prompt, hits, cancel)?;
                due &= due - 1;
            }
        }
        Ok(())
    }

    /// `read_exact`'s look at replica `r` for a unit of prompt length `prompt` arriving at `a`.
    fn look_at(
        &mut self,
        r: usize,
        a: i64,
        prompt: u64,
        hits: bool,
        cancel: &AtomicBool,
    ) -> Result<()> {
        let quiet = self.lazy && a <= self.quiet_until[r];
        if quiet && !hits {
            return Ok(());
        }
        let bs = self.block_size[r];
        if hits {
            self.views[r].lookup_blocks = div_bs(prompt.saturating_sub(1), bs);
        }
        if quiet {
            // The rest of its view holds (none in flight); its prefix map is the one at `a`.
            self.read_hits(r, bs, prompt);
            return Ok(());
        }
        // A replica whose steps up to `a` leave the signals the router reads as they are (but for
        // the running count it tells) shows now what it would show at `a`: it takes those steps
        // later, in one piece. Its `kv_used` is then now's, read only by routers that need no more.
        let mut running = None;
        let vouch = if self.lazy {
            self.replicas[r].quiet_through(a, self.reads)
        } else {
            None
        };
        if let Some((until, n)) = vouch {
            self.quiet_until[r] = until;
            running = Some(n);
        } else {
            self.advance_replica(r, a, cancel)?;
            self.moved[r] = true;
            self.quiet_until[r] = i64::MIN;
            self.advances += 1;
        }
        let rep = &self.replicas[r];
        let v = &mut self.views[r];
        if self.moved[r] {
            // Waiting, running and the KV counts change only when the replica steps.
            (v.kv_used, v.kv_total) = rep.kv();
            v.waiting = rep.waiting();
            v.running = rep.running();
            self.moved[r] = false;
        }
        if let Some(n) = running {
            v.running = n;
        }
        // Every row pushed to it has arrived by `a`: those not joined stay in flight for the
        // vouch (their joins leave the load as it is, `Engine::quiet_through`).
        v.in_flight = rep.in_flight(a);
        // Looked up only now: the steps just taken may have registered or evicted keys.
        if hits {
            self.read_hits(r, bs, prompt);
        }
        Ok(())
    }

    /// What the router reads for `row`, arriving at `a`: exact, stale, or nothing (grouped replicas behind a
    /// router that reads nothing: every group runs at the end).
    fn read(&mut self, row: usize, a: i64, spec: &RouterSpec, cancel: &AtomicBool) -> Result<()> {
        if !spec.kind.reads_state() {
            Ok(())
        } else if spec.refresh_ps > 0 {
            self.read_stale(row, a, spec.refresh_ps, cancel)
        } else {
            self.read_exact(row, a, cancel)
        }
    }

    /// Replica `r` advanced to `horizon` (every step starting before it), with its group if it has one,
    /// and its rows done moved out.
    fn advance_replica(&mut self, r: usize, horizon: i64, cancel: &AtomicBool) -> Result<()> {
        if let Some(groups) = &mut self.groups {
            let g = groups.group_of(r);
            groups.advance(g, &mut self.replicas, horizon, cancel)?;
            for q in groups.ranks(g) {
                self.replicas[q].drain_done(&mut self.out);
            }
            return Ok(());
        }
        self.replicas[r].advance_until(horizon, cancel)?;
        self.replicas[r].drain_done(&mut self.out);
        Ok(())
    }

    /// Replica `r`'s leading prefix hits for the unit being routed, from its prefix map as it is now
    /// (stepped to the arrival, or vouched for up to it); the router reads prefix hits.
    fn read_hits(&mut self, r: usize, bs: u64, prompt: u64) {
        let no_snapshot: Option<&HashSet<BlockKey, BuildHasherDefault<IdHasher>>> = None;
        let unit = (&self.segs[..], &mut self.hybrid_keys);
        if let Some(hit) = self.replicas[r].hybrid_hit_blocks(unit, prompt, no_snapshot) {
            self.views[r].hit_blocks = hit; // (a hybrid model: its lookup over every group)
            return;
        }
        let keys = self.keys_of(bs);
        self.views[r].hit_blocks = if keys.is_empty() {
            0
        } else {
            self.replicas[r].leading_hits(keys)
        };
    }

    /// The stale view for `row`, arriving at `a`: the snapshot at `floor(a / refresh) * refresh` (taken
    /// now if it is a new instant) plus the units routed since.
    fn read_stale(&mut self, row: usize, a: i64, refresh: i64, cancel: &AtomicBool) -> Result<()> {
        let s = a.div_euclid(refresh) * refresh;
        if self.snap_at != Some(s) {
            self.snap_at = Some(s);
            if let Some(groups) = &mut self.groups {
                for g in 0..groups.len() {
                    groups.advance(g, &mut self.replicas, s, cancel)?;
                }
            }
            for (rep, snap) in self.replicas.iter_mut().zip(&mut self.snaps) {
                if self.groups.is_none() {
                    rep.advance_until(s, cancel)?;
                }
                rep.drain_done(&mut self.out);
                let (kv_used, kv_total) = rep.kv();
                snap.signals = Signals {
                    waiting: rep.waiting(),
                    running: rep.running(),
                    in_flight: rep.in_flight(s),
                    kv_used,
                    kv_total,
                    ..Signals::default()
                };
                snap.keys.clear();
                if self.wants_keys {
                    snap.keys.extend(rep.cached_keys());
                }
                snap.routed = 0;
            }
        }
        let prompt = self.inp.prompt_len[row] as u64;
        for r in 0..self.replicas.len() {
            let (rep, snap) = (&self.replicas[r], &self.snaps[r]);
            let bs = rep.config().block_size;
            let mut v = snap.signals;
            v.in_flight += snap.routed;
            v.lookup_blocks = prompt.saturating_sub(1) / bs;
            if self.wants_keys && rep.caches_prefixes() {
                let unit = (&self.segs[..], &mut self.hybrid_keys);
                v.hit_blocks = match rep.hybrid_hit_blocks(unit, prompt, Some(&snap.keys)) {
                    Some(hit) => hit, // (a hybrid model: its lookup over every group)
                    None => self
                        .keys_of(bs)
                        .iter()
                        .take_while(|k| snap.keys.contains(k))
                        .count() as u64,
                };
            }
            self.views[r] = v;
            // The exact view's caches (a run reads one kind of view; kept true all the same).
            self.moved[r] = true;
            self.quiet_until[r] = i64::MIN;
        }
        self.hits_zero = false;
        Ok(())
    }
}

/// Runs the workload `inp` on `cfgs.len()` replicas (replica `r` under `cfgs[r]`) behind the router
/// `spec`, on one clock (the cluster contract): for each unit in arrival order, a router that reads
/// state first advances every replica to the unit's arrival (or, with a stale view, to the refresh
/// instant); the unit is pushed to the replica picked; then every replica runs to its end. `cancel`
/// (Ctrl-C) is read between units and inside every replica's steps.
pub fn run_cluster(
    inp: EngineInput<'_>,
    cfgs: &[EngineConfig],
    spec: &RouterSpec,
    cancel: &AtomicBool,
) -> Result<ClusterOutput> {
    drive(inp, cfgs, spec, cancel, true).map(|(out, _)| out)
}

/// `run_cluster`, with `lazy` false: every replica stepped to every arrival (the tests' yardstick);
/// also returns how many times the exact view stepped a replica.
fn drive(
    inp: EngineInput<'_>,
    cfgs: &[EngineConfig],
    spec: &RouterSpec,
    cancel: &AtomicBool,
    lazy: bool,
) -> Result<(ClusterOutput, u64)> {
    validate(&inp, cfgs, spec.dp_group)?;
    let defer_keys = !inp.segment_id.iter().any(|&id| id >= OUTPUT_BIT);
    let forks = inp.has_forks();
    let private_from = if defer_keys
        && cfgs
            .iter()
            .any(|c| c.enable_prefix_caching && c.policy.is_paged())
    {
        private_starts(&inp)
    } else {
        Vec::new()
    };
    // Past this, the router reads state (the interleaved drive), or the replicas step in groups.
    let grouped = spec.dp_group > 1;
    if !spec.kind.reads_state() && !grouped {
        let out = run_independent(&inp, cfgs, spec, cancel, &private_from, defer_keys, forks)?;
        return Ok((out, 0));
    }
    let mut replicas = Vec::with_capacity(cfgs.len());
    for cfg in cfgs {
        replicas.push(Replica::new(cfg.clone(), defer_keys, forks, Some(cancel))?);
    }
    // The block sizes of the replicas whose prefix maps can hold keys: a prompt is hashed once per size.
    let mut sizes: Vec<u64> = replicas
        .iter()
        .filter(|r| r.caches_prefixes())
        .map(|r| r.config().block_size)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut d = Driver {
        inp,
        replicas,
        private_from,
        wants_keys: match spec.kind {
            RouterKind::PrefixAffinity => true,
            RouterKind::Weighted => spec.weights.prefix != 0.0,
            _ => false,
        },
        keys: vec![Vec::new(); sizes.len()],
        sizes,
        segs: Vec::new(),
        hybrid_keys: SharedKeys::default(),
        views: vec![Signals::default(); cfgs.len()],
        snaps: (0..cfgs.len()).map(|_| Snapshot::default()).collect(),
        snap_at: None,
        // (a group's ranks are stepped by their group: no replica vouches for itself)
        lazy: lazy && !grouped,
        reads: router_reads(spec),
        moved: vec![true; cfgs.len()],
        quiet_until: vec![i64::MIN; cfgs.len()],
        advances: 0,
        block_size: cfgs.iter().map(|c| c.block_size).collect(),
        hits_zero: true,
        hybrid_replicas: cfgs.iter().filter(|c| c.groups.is_some()).count(),
        out: EngineOutput::new(inp.len()),
        groups: grouped.then(|| dp::Groups::new(cfgs.len(), spec.dp_group)),
    };
    let mut router = Router::new(spec.clone());
    let mut replica = vec![0i64; inp.len()];
    let mut row = 0;
    let mut units = 0u64;
    while row < inp.len() {
        units += 1;
        every_1024th(units, cancel)?;
        let end = unit_end(&inp, row);
        let arrival = inp.arrival_ps[row];
        if units % 4 == 0 {
            // A line holds 8 rows of the 64-bit columns: every 4th unit asks for each line twice.
            d.prefetch_input(row + PREFETCH_AHEAD);
        }
        if d.wants_keys && !d.sizes.is_empty() {
            d.hash_prompt(row);
        }
        d.read(row, arrival, spec, cancel)?;
        let r = router.pick(cfgs.len(), &d.views);
        d.replicas[r].push(&inp, row..end, &d.private_from);
        d.quiet_until[r] = d.quiet_until[r].min(arrival - 1);
        d.snaps[r].routed += 1;
        replica[row..end].fill(r as i64);
        row = end;
    }
    if let Some(groups) = &mut d.groups {
        groups.finish(&mut d.replicas, cancel)?;
    }
    for rep in &mut d.replicas {
        rep.finish(cancel)?;
    }
    let advances = d.advances;
    let mut out = std::mem::take(&mut d.out);
    let first: Vec<usize> = d.replicas.iter().map(first_held).collect();
    let outs = d.replicas.iter_mut().map(Replica::take_output).collect();
    drop(d);
    let counters = gather(&mut out, &replica, outs, &first);
    Ok((
        ClusterOutput {
            out,
            replica,
            counters,
        },
        advances,
    ))
}

/// What `spec`'s router reads of a replica besides its load (`router::Router::pick`'s rules): a
/// weighted scorer of weight 0 adds `0.0 * s`, the same whatever `s` is.
fn router_reads(spec: &RouterSpec) -> RouterReads {
    match spec.kind {
        RouterKind::LeastLoaded => RouterReads::default(),
        RouterKind::LeastKv => RouterReads {
            kv: true,
            keys: false,
        },
        RouterKind::PrefixAffinity => RouterReads {
            kv: false,
            keys: true,
        },
        RouterKind::Weighted => RouterReads {
            kv: spec.weights.kv != 0.0,
            keys: spec.weights.prefix != 0.0,
        },
        // Not driven by `Driver` (`run_independent`); what they would read is everything.
        RouterKind::RoundRobin | RouterKind::Random => RouterReads {
            kv: true,
            keys: true,
        },
    }
}

/// A router that reads no state (round-robin, random) picks the same replicas whatever they do, and
/// the interleaved drive steps none of them before its end: the fleet is its replicas' runs side by
/// side, each on its own rows. So every unit is routed first; then each replica is made, given its
/// rows in workload order, run to its end and dropped, one after the other (one replica's input and
/// state in memory at a time, its rows' in cache while it runs), and its output kept for `gather`.
fn run_independent(
    inp: &EngineInput<'_>,
    cfgs: &[EngineConfig],
    spec: &RouterSpec,
    cancel: &AtomicBool,
    private_from: &[u64],
    defer_keys: bool,
    forks: bool,
) -> Result<ClusterOutput> {
    let n = cfgs.len();
    let mut router = Router::new(spec.clone());
    let mut replica = vec![0i64; inp.len()];
    // Each replica's units, by their first row in workload order (a counting sort of the picks).
    let mut offset = vec![0usize; n + 1];
    let (mut row, mut units) = (0, 0u64);
    while row < inp.len() {
        units += 1;
        every_1024th(units, cancel)?;
        let end = unit_end(inp, row);
        let r = router.pick(n, &[]);
        replica[row..end].fill(r as i64);
        offset[r + 1] += 1;
        row = end;
    }
    for r in 0..n {
        offset[r + 1] += offset[r];
    }
    let mut starts = vec![0usize; offset[n]];
    let mut at = offset.clone();
    row = 0;
    while row < inp.len() {
        let r = replica[row] as usize;
        starts[at[r]] = row;
        at[r] += 1;
        row = unit_end(inp, row);
    }
    let mut outs = Vec::with_capacity(n);
    let mut first = Vec::with_capacity(n);
    for (r, cfg) in cfgs.iter().enumerate() {
        let mut rep = Replica::new(cfg.clone(), defer_keys, forks, Some(cancel))?;
        for (k, &start) in starts[offset[r]..offset[r + 1]].iter().enumerate() {
            every_1024th(k as u64 + 1, cancel)?;
            rep.push(inp, start..unit_end(inp, start), private_from);
        }
        rep.finish(cancel)?;
        first.push(first_held(&rep));
        outs.push(rep.take_output());
    }
    let mut out = EngineOutput::new(inp.len());
    let counters = gather(&mut out, &replica, outs, &first);
    Ok(ClusterOutput {
        out,
        replica,
        counters,
    })
}

/// The first row whose output `rep` still holds (`Replica::rows_held`), or none.
fn first_held(rep: &Replica) -> usize {
    rep.rows_held().first().copied().unwrap_or(usize::MAX)
}

/// The rows each replica still holds (`outs[r]`, from row `first[r]` on: a suffix of its rows) into
/// `out`, in workload order a column at a time (one read stream a replica; a row at a time would be
/// ten), from the first of them on; returns each replica's counters.
fn gather(
    out: &mut EngineOutput,
    replica: &[i64],
    outs: Vec<EngineOutput>,
    first: &[usize],
) -> Vec<Counters> {
    let from = first
        .iter()
        .copied()
        .min()
        .unwrap_or(usize::MAX)
        .min(replica.len());
    let mut at = vec![0usize; outs.len()];
    macro_rules! gather_column {
        ($col:ident, $init:expr) => {
            let cols: Vec<&[_]> = outs.iter().map(|o| o.$col.as_slice()).collect();
            at.fill(0);
            for (i, (dst, &r)) in out.$col[from..]
                .iter_mut()
                .zip(&replica[from..])
                .enumerate()
            {
                let r = r as usize;
                // A replica's rows before its first held one moved out as they were done.
                if from + i >= first[r] {
                    *dst = cols[r][at[r]];
                    at[r] += 1;
                }
            }
        };
    }
    for_each_row_column!(gather_column);
    outs.into_iter().map(|o| o.counters).collect()
}

#[cfg(test)]
mod tests;
