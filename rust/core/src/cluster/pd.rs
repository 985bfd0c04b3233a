//! A disaggregated fleet (DESIGN.md §Prefill/decode disaggregation): decode replicas and a prefill pool
//! on one clock. Each unit's decode replica is picked first; unless the prompt part not cached there is
//! under the threshold, a prefill replica is picked too and runs it to its first token; at that finish
//! it joins its decode replica as a remote request, whose full blocks come over the decode replica's
//! inbound link into the held queue (`engine/offload/`), and the prefill replica holds its blocks
//! until the transfer ends. The replicas' steps are taken in one global order by start instant, in
//! rounds of windows (`step_until`); every step before a unit's arrival is taken before it is routed,
//! unless no decision reads a replica (`route_blind`: rows routed a batch at a time).
//! The reference's twin is `kvsim.reference.cluster._run_pd`.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::atomic::AtomicBool;

use super::{
    ClusterOutput, Replica, Router, RouterKind, RouterSpec, Signals, every_1024th, validate,
};
use crate::block_pool::{IdHasher, RowMap};
use crate::block_table::BlockTable;
use crate::engine::{
    EngineConfig, EngineInput, EngineOutput, OUTPUT_BIT, Policy, Preemption, for_each_row_column,
    private_starts,
};
use crate::kv_groups::SharedKeys;
use crate::{BlockKey, Result, Segment, invalid_arg};

/// A hand-off's prefill replica for a row the route-first drive prefills on its decode replica.
const LOCAL: usize = usize::MAX;
/// The route-first drive's batch: units routed before the fleet steps to the next one's first arrival.
const BLIND_BATCH: usize = 4096;

/// A replica's next step's start (`i64::MAX`: none).
fn next_start(rep: &Replica) -> i64 {
    rep.next_event().unwrap_or(i64::MAX)
}

/// The prefill pool of a disaggregated fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PdSpec {
    /// Prefill replicas (at least 1); each runs the decode replicas' first config.
    pub prefill_replicas: usize,
    /// A request whose prompt part not cached on its decode replica is under this prefills there.
    pub threshold_tokens: u64,
    /// A transfer's fixed time, and a block's, on a decode replica's inbound link.
    pub link_latency_ps: u64,
    pub link_ps_per_block: u64,
}

/// A disaggregated run's result: the fleet's output (`replica`: the decode replica; `counters`: the
/// decode replicas', then the prefill replicas') and per row its prefill replica (-1: prefilled on its
/// decode replica), when that replica first scheduled it and when it finished it (-1: none).
#[derive(Debug, Default)]
pub struct PdOutput {
    pub cluster: ClusterOutput,
    pub prefill_replica: Vec<i64>,
    pub prefill_first_scheduled: Vec<i64>,
    pub prefill_finish: Vec<i64>,
}

/// Refuses what a disaggregated fleet does not model (the Python side refuses it first, naming the
/// same fields).
fn check(
    inp: &EngineInput<'_>,
    cfgs: &[EngineConfig],
    prefill_cfg: &EngineConfig,
    spec: &RouterSpec,
    pd: &PdSpec,
) -> Result<()> {
    if pd.prefill_replicas == 0 {
        invalid_arg!(
            "prefill_replicas 0: a disaggregated fleet needs at least one prefill replica"
        );
    }
    if spec.dp_group > 1 {
        invalid_arg!(
            "dp_group {}: a disaggregated fleet (prefill_replicas > 0) with data-parallel groups is not modelled",
            spec.dp_group
        );
    }
    let mut all = cfgs.to_vec();
    all.extend(std::iter::repeat_n(
        prefill_cfg.clone(),
        pd.prefill_replicas,
    ));
    validate(inp, &all, 1)?;
    let states = cfgs[0]
        .groups
        .as_ref()
        .is_some_and(crate::kv_groups::Groups::has_mamba);
    if states && cfgs[0].enable_prefix_caching && prefill_cfg.block_size != cfgs[0].block_size {
        invalid_arg!(
            "prefill_config's block size {} differs from the decode replicas' {} for Mamba (state) groups with prefix caching: vLLM 0.33.0's and 0.34.0's NIXL connector refuses it (give both pools one block size)",
            prefill_cfg.block_size,
            cfgs[0].block_size
        );
    }
    if inp.has_forks() {
        invalid_arg!("sampling 'fork-cow': a disaggregated fleet routes one sequence a request");
    }
    if spec.refresh_ps != 0 {
        invalid_arg!(
            "router_refresh_ps {}: a disaggregated fleet's routers read the replicas exactly (use 0)",
            spec.refresh_ps
        );
    }
    if prefill_cfg.tier.is_some() {
        invalid_arg!("prefill_config: a CPU tier is not modelled on a prefill replica");
    }
    if matches!(
        prefill_cfg.time,
        crate::engine::TimeModel::Linear {
            c0_ps: 0,
            c_tok_ps: 0,
            c_ctx_ps: 0
        }
    ) {
        invalid_arg!(
            "prefill_config: c0_ps, c_tok_ps and c_ctx_ps all 0 make a prefill step last no time, which the fleet's one clock does not order"
        );
    }
    let c = &cfgs[0];
    if c.tier.is_some() {
        invalid_arg!("cpu_tier: a CPU tier is not modelled with a prefill pool");
    }
    if c.policy != Policy::Vllm
        || c.preemption != Preemption::Recompute
        || c.skip_over_budget
        || c.one_free_block
        || !c.watermark_while_running
    {
        invalid_arg!(
            "a disaggregated fleet's decode replicas take vLLM v1's rules: policy 'vllm', preemption 'recompute', waiting_over_budget 'stop', append_check 'exact', watermark_rule 'while-running'"
        );
    }
    Ok(())
}

/// What a router reads of `rep` at the instant it was stepped to (`a`), with the unit's prefix hits on
/// it if `want` (`keys`: its prompt's lookup keys at the replica's block size; `unit` its segments and
/// a hybrid model's key chains).
fn signals(
    rep: &Replica,
    a: i64,
    (want, keys): (bool, &[BlockKey]),
    unit: (&[Segment], &mut SharedKeys),
    prompt: u64,
) -> Signals {
    let (kv_used, kv_total) = rep.kv();
    let bs = rep.config().block_size;
    Signals {
        waiting: rep.waiting(),
        running: rep.running(),
        in_flight: rep.in_flight(a),
        kv_used,
        kv_total,
        hit_blocks: hit_blocks(rep, (want, keys), unit, prompt),
        lookup_blocks: prompt.saturating_sub(1) / bs,
    }
}

/// `rep`'s prefix hit for a prompt if it is read (`want`), in blocks of its block size: a hybrid model's
/// lookup over every group (`Replica::hybrid_hit_blocks`, which reads the prompt's segments and key
/// chains `unit`, whatever its keys: a chunked-local group's skipped chunks hit with nothing cached),
/// else its leading `keys` in its prefix map (none for a prompt whose blocks cannot hit: its keys are
/// private).
fn hit_blocks(
    rep: &Replica,
    (want, keys): (bool, &[BlockKey]),
    unit: (&[Segment], &mut SharedKeys),
    prompt: u64,
) -> u64 {
    if !want {
        return 0;
    }
    let no_snapshot: Option<&HashSet<BlockKey, BuildHasherDefault<IdHasher>>> = None;
    if let Some(hit) = rep.hybrid_hit_blocks(unit, prompt, no_snapshot) {
        return hit;
    }
    if keys.is_empty() {
        0
    } else {
        rep.leading_hits(keys)
    }
}

/// The disaggregated fleet's state between units.
struct PdDriver<'i, 'p> {
    inp: EngineInput<'i>,
    pd: &'p PdSpec,
    /// Each pool's block size and whether its prefix maps can hold keys.
    bs: u64,
    caching: bool,
    bs_p: u64,
    caching_p: bool,
    wants_keys: bool,
    /// Prompt tokens a prefill replica leaves to the decode side: 1 for a model with a Mamba group
    /// (vLLM's `_prefill_backoff`), else 0.
    backoff: i64,
    private_from: Vec<u64>,
    decode: Vec<Replica>,
    prefill: Vec<Replica>,
    route_d: Router,
    route_p: Router,
    replica: Vec<i64>,
    pre: Vec<i64>,
    /// Per prefill replica: its row -> (the input row, the decode replica) of each request in flight.
    pending: Vec<RowMap<(usize, usize)>>,
    done_rows: Vec<usize>,
    /// Known hand-offs not yet pushed: (prefill finish, prefill replica, input row, decode replica,
    /// row on the prefill replica); the route-first drive also queues its locally prefilled rows here
    /// (arrival, `LOCAL`, row, replica, 0).
    handoffs: Vec<(i64, usize, usize, usize, usize)>,
    /// The least arrival in `handoffs` (`i64::MAX`: none), so that a `deliver` with none due costs
    /// one comparison.
    handoff_min: i64,
    /// Per decode replica, its remote rows whose transfer end it has not decided: its row -> (prefill
    /// replica, row there).
    remote_of: Vec<RowMap<(usize, usize)>>,
    /// Per prefill replica and decode replica: its requests in flight or held with an end undecided
    /// (pushed there or not); and per prefill replica, its hand-offs not pushed yet.
    undecided: Vec<Vec<u64>>,
    unpushed: Vec<u64>,
    decided: Vec<(usize, i64)>,
    lb_d: Vec<i64>,
    /// Each replica's next step's start (`next_start`), kept up to date after every push, advance and
    /// transfer end given.
    ne_d: Vec<i64>,
    ne_p: Vec<i64>,
    segs: Vec<Segment>,
    /// A hybrid model's key chains of the unit's prompt, which every replica's lookup reads.
    hybrid_keys: SharedKeys,
    /// The unit's prompt keys at the decode pool's block size and, for a router that reads prefix
    /// hits, at the prefill pool's.
    keys: Vec<BlockKey>,
    keys_p: Vec<BlockKey>,
    views_d: Vec<Signals>,
    views_p: Vec<Signals>,
    /// The fleet's output columns, in workload order: a decode replica's rows done move here as it
    /// steps (`Replica::drain_done`), a prefill replica's rejected rows likewise (its rows handed off
    /// dropped), the rest at the end.
    out: EngineOutput,
    /// Per row, when its prefill replica first scheduled it and when it finished it (-1: none), set as
    /// the row is collected.
    first: Vec<i64>,
    finish: Vec<i64>,
}

impl PdDriver<'_, '_> {
    /// Prefill replica `p`'s requests finished since the last call become hand-offs (rejected ones keep
    /// their prefill output, moved to the fleet's columns).
    fn collect(&mut self, p: usize) {
        let rep = &mut self.prefill[p];
        rep.take_done_rows(&mut self.done_rows);
        for &k in &self.done_rows {
            let (row, d) = self.pending[p].remove(&k).expect("a row in flight");
            let (status, f0, f1) = rep.row_outcome(k);
            self.first[row] = f0;
            self.finish[row] = f1;
            if status == crate::engine::FINISHED {
                self.handoffs.push((f1, p, row, d, k));
                self.handoff_min = self.handoff_min.min(f1);
                self.unpushed[p] += 1;
            } else {
                self.undecided[p][d] -= 1;
            }
        }
        self.done_rows.clear();
        // Collected rows are read no more: the rejected ones' output moves to the fleet's columns.
        rep.drain_done_if(&mut self.out, |s| s != crate::engine::FINISHED);
    }

    /// Pushes every known hand-off (and queued local row) arriving before `limit` to its decode
    /// replica, in order of arrival, prefill replica (`LOCAL` last) and row; whether one was.
    fn deliver(&mut self, limit: i64) -> bool {
        if self.handoff_min >= limit {
            return false;
        }
        self.handoffs.sort_unstable();
        let mut at = 0;
        while at < self.handoffs.len() && self.handoffs[at].0 < limit {
            let (finish, src, row, dst, on_src) = self.handoffs[at];
            let rep = &mut self.decode[dst];
            if src == LOCAL {
                rep.push(&self.inp, row..row + 1, &self.private_from);
            } else {
                rep.push_pd(
                    &self.inp,
                    row,
                    &self.private_from,
                    Some(finish),
                    false,
                    true,
                    0,
                );
                self.remote_of[dst].insert(rep.len() - 1, (src, on_src));
                self.unpushed[src] -= 1;
            }
            self.ne_d[dst] = next_start(rep);
            at += 1;
        }
        self.handoffs.drain(..at);
        // (Sorted: the first left is the least.)
        self.handoff_min = self.handoffs.first().map_or(i64::MAX, |h| h.0);
        at > 0
    }

    /// Rounds of windows until no replica has a step starting before `a` (DESIGN.md §Prefill/decode
    /// disaggregation, the order of events): the decode replicas to `H_d`, their decided transfer ends
    /// to the prefill replicas, each prefill replica to its `H_p`, their finishes collected.
    fn step_until(&mut self, a: i64, cancel: &AtomicBool) -> Result<()> {
        loop {
            // A prefill replica stalled for its held blocks steps next at its next arrival, an end
            // decided, or an end still undecided: at or after its decode replicas' next steps, or
            // after the finish of a hand-off not pushed yet.
            let mut lb_p = a;
            for (p, rep) in self.prefill.iter().enumerate() {
                let mut t = self.ne_p[p];
                if rep.stalled_on_sends() {
                    for (d, &c) in self.undecided[p].iter().enumerate() {
                        if c > 0 {
                            t = t.min(self.ne_d[d]);
                        }
                    }
                    if self.unpushed[p] > 0 {
                        for h in self.handoffs.iter().filter(|h| h.1 == p) {
                            t = t.min(h.0);
                        }
                    }
                }
                lb_p = lb_p.min(t);
            }
            let h_d = a.min(lb_p.saturating_add(1));
            let mut moved = self.deliver(h_d);
            // The least next step's start of each pool once this round's steps are taken.
            let (mut min_d, mut min_p) = (i64::MAX, i64::MAX);
            for (d, rep) in self.decode.iter_mut().enumerate() {
                if self.ne_d[d] < h_d {
                    rep.advance_until(h_d, cancel)?;
                    rep.drain_done(&mut self.out);
                    moved = true;
                    self.ne_d[d] = next_start(rep);
                    rep.take_sends_decided(&mut self.decided);
                    for (row, end) in self.decided.drain(..) {
                        let (p, k) = self.remote_of[d]
                            .remove(&row)
                            .expect("a remote row of this decode replica");
                        self.prefill[p].send_ended(k, end);
                        self.ne_p[p] = next_start(&self.prefill[p]);
                        self.undecided[p][d] -= 1;
                    }
                }
                self.lb_d[d] = self.ne_d[d].min(h_d);
                min_d = min_d.min(self.ne_d[d]);
            }
            for p in 0..self.prefill.len() {
                if self.ne_p[p] >= a {
                    min_p = min_p.min(self.ne_p[p]);
                    continue; // no step before `a`, and `h_p <= a`
                }
                let mut h_p = a;
                if self.unpushed[p] > 0 {
                    h_p = h_p.min(h_d);
                }
                // A request finished by now, or by a step of this window, holds its blocks until an
                // end its decode replica decides at or after its next step.
                for (d, &c) in self.undecided[p].iter().enumerate() {
                    if c > 0 {
                        h_p = h_p.min(self.lb_d[d]);
                    }
                }
                if self.ne_p[p] < h_p {
                    let rep = &mut self.prefill[p];
                    rep.advance_until(h_p, cancel)?;
                    self.ne_p[p] = next_start(rep);
                    self.collect(p);
                    moved = true;
                }
                min_p = min_p.min(self.ne_p[p]);
            }
            // Done when no replica has a step before `a` and no hand-off arrives before it: a further
            // round would change nothing.
            if min_d.min(min_p).min(self.handoff_min) >= a {
                return Ok(());
            }
            if !moved {
                return Err(crate::KvError::Internal(
                    "the disaggregated fleet's drive made no progress".into(),
                ));
            }
        }
    }

    /// Routes `row`, arriving at `a`: every step before `a` taken and the hand-offs up to `a` pushed,
    /// its decode replica picked, then, unless it prefills there, its prefill replica.
    fn route(&mut self, row: usize, cancel: &AtomicBool) -> Result<()> {
        let inp = self.inp;
        let a = inp.arrival_ps[row];
        self.step_until(a, cancel)?;
        self.deliver(a.saturating_add(1));
        let prompt = inp.prompt_len[row] as u64;
        self.keys.clear();
        self.keys_p.clear();
        let want_d = self.caching && (self.wants_keys || self.pd.threshold_tokens > 0);
        let want_p = self.caching_p && self.wants_keys;
        if want_d || want_p {
            let (lo, hi) = (
                inp.seg_offsets[row] as usize,
                inp.seg_offsets[row + 1] as usize,
            );
            self.segs.clear();
            self.segs.extend(
                (lo..hi).map(|k| Segment::new(inp.segment_id[k], inp.segment_len[k] as u64)),
            );
            self.hybrid_keys.reset();
            let private = self.private_from.get(row).copied();
            for (want, bs, keys) in [
                (want_d, self.bs, &mut self.keys),
                (want_p, self.bs_p, &mut self.keys_p),
            ] {
                if want {
                    let limit = private.map_or(u64::MAX, |p| p / bs);
                    BlockTable::lookup_keys(bs, &self.segs, prompt, limit, keys);
                }
            }
        }
        let router = (want_d && self.wants_keys, &self.keys[..]);
        for (v, rep) in self.views_d.iter_mut().zip(&self.decode) {
            *v = signals(rep, a, router, (&self.segs, &mut self.hybrid_keys), prompt);
        }
        let d = self.route_d.pick(self.decode.len(), &self.views_d);
        self.replica[row] = d as i64;
        let unit = (&self.segs[..], &mut self.hybrid_keys);
        let hits = hit_blocks(&self.decode[d], (want_d, &self.keys), unit, prompt);
        if prompt - hits * self.bs < self.pd.threshold_tokens {
            self.decode[d].push(&inp, row..row + 1, &self.private_from);
            self.ne_d[d] = next_start(&self.decode[d]);
            return Ok(());
        }
        for (v, rep) in self.views_p.iter_mut().zip(&self.prefill) {
            *v = signals(
                rep,
                a,
                (want_p, &self.keys_p),
                (&self.segs, &mut self.hybrid_keys),
                prompt,
            );
        }
        let p = self.route_p.pick(self.prefill.len(), &self.views_p);
        self.push_prefill(p, row, d);
        Ok(())
    }

    /// Pushes `row` to prefill replica `p` (its decode replica `d`) with target 1.
    fn push_prefill(&mut self, p: usize, row: usize, d: usize) {
        let backoff = self.backoff;
        self.prefill[p].push_pd(
            &self.inp,
            row,
            &self.private_from,
            None,
            true,
            false,
            backoff,
        );
        self.pending[p].insert(self.prefill[p].len() - 1, (row, d));
        self.undecided[p][d] += 1;
        self.pre[row] = p as i64;
        self.ne_p[p] = next_start(&self.prefill[p]);
    }

    /// Routes `row` without stepping a replica (the route-first drive: `blind`): the routers read
    /// nothing and no decode replica's prefix hits are read, so the picks and the threshold's choice do
    /// not depend on the replicas' state. A row prefilled locally waits among the hand-offs, at its
    /// arrival after every hand-off finished then (`LOCAL` sorts after every prefill replica), so each
    /// decode replica gets its rows in the interleaved drive's order; a prefilled row is pushed to its
    /// prefill replica at once (no replica has stepped to its arrival).
    fn route_blind(&mut self, row: usize) {
        let inp = self.inp;
        let d = self.route_d.pick(self.decode.len(), &[]);
        self.replica[row] = d as i64;
        if (inp.prompt_len[row] as u64) < self.pd.threshold_tokens {
            self.handoffs.push((inp.arrival_ps[row], LOCAL, row, d, 0));
            self.handoff_min = self.handoff_min.min(inp.arrival_ps[row]);
            return;
        }
        let p = self.route_p.pick(self.prefill.len(), &[]);
        self.push_prefill(p, row, d);
    }

    /// Runs every replica to its end (`step_until` with no arrival left) and gathers the rows: each
    /// replica's remaining output, then it is dropped.
    fn finish(mut self, cancel: &AtomicBool) -> Result<PdOutput> {
        self.step_until(i64::MAX, cancel)?;
        let mut out = std::mem::take(&mut self.out);
        let mut counters = Vec::with_capacity(self.decode.len() + self.prefill.len());
        let mut counters_p = Vec::with_capacity(self.prefill.len());
        let prefill = std::mem::take(&mut self.prefill);
        for mut rep in prefill {
            rep.finish(cancel)?;
            let o = rep.take_output();
            let rows = rep.rows_held();
            // Rows the prefill replica rejected keep its output (they never reach a decode replica).
            macro_rules! scatter_rejected {
                ($col:ident, $init:expr) => {
                    for (k, &row) in rows.iter().enumerate() {
                        if o.status[k] != crate::engine::FINISHED {
                            out.$col[row] = o.$col[k];
                        }
                    }
                };
            }
            for_each_row_column!(scatter_rejected);
            counters_p.push(o.counters);
        }
        let decode = std::mem::take(&mut self.decode);
        for mut rep in decode {
            rep.finish(cancel)?;
            let o = rep.take_output();
            let rows = rep.rows_held();
            macro_rules! scatter {
                ($col:ident, $init:expr) => {
                    for (k, &row) in rows.iter().enumerate() {
                        out.$col[row] = o.$col[k];
                    }
                };
            }
            for_each_row_column!(scatter);
            counters.push(o.counters);
        }
        counters.extend(counters_p);
        Ok(PdOutput {
            cluster: ClusterOutput {
                out,
                replica: self.replica,
                counters,
            },
            prefill_replica: self.pre,
            prefill_first_scheduled: self.first,
            prefill_finish: self.finish,
        })
    }
}

/// Runs `inp` on the decode replicas `cfgs` and `pd.prefill_replicas` prefill replicas under
/// `prefill_cfg` (None: `cfgs[0]`) behind the router `spec` on one clock (DESIGN.md §Prefill/decode
/// disaggregation). The prefill pool's router is `spec` with the seed plus 1 (wrapping): its own
/// stream and count.
pub fn run_pd(
    inp: EngineInput<'_>,
    cfgs: &[EngineConfig],
    prefill_cfg: Option<&EngineConfig>,
    spec: &RouterSpec,
    pd: &PdSpec,
    cancel: &AtomicBool,
) -> Result<PdOutput> {
    if cfgs.is_empty() {
        invalid_arg!("configs: a cluster needs at least one replica, got 0");
    }
    let prefill_cfg = prefill_cfg.unwrap_or(&cfgs[0]);
    check(&inp, cfgs, prefill_cfg, spec, pd)?;
    let n = inp.len();
    let cfg = &cfgs[0];
    let defer_keys = !inp.segment_id.iter().any(|&id| id >= OUTPUT_BIT);
    let caches = |c: &EngineConfig| c.enable_prefix_caching && c.policy.is_paged();
    let (caching, caching_p) = (caches(cfg), caches(prefill_cfg));
    let private_from = if defer_keys && (caching || caching_p) {
        private_starts(&inp)
    } else {
        Vec::new()
    };
    let mut decode = Vec::with_capacity(cfgs.len());
    for c in cfgs {
        let mut rep = Replica::new(c.clone(), defer_keys, false, Some(cancel))?;
        rep.set_pd_link(pd.link_latency_ps, pd.link_ps_per_block);
        decode.push(rep);
    }
    let mut prefill = Vec::with_capacity(pd.prefill_replicas);
    for _ in 0..pd.prefill_replicas {
        let mut rep = Replica::new(prefill_cfg.clone(), defer_keys, false, Some(cancel))?;
        rep.set_hold_sends(prefill_cfg.policy.is_paged());
        prefill.push(rep);
    }
    // The route-first drive when no decision reads a replica (DESIGN.md §Prefill/decode
    // disaggregation): rows routed a batch at a time, with no replica cut at every arrival.
    let blind = !spec.kind.reads_state() && (!caching || pd.threshold_tokens == 0);
    let mut d = PdDriver {
        inp,
        pd,
        bs: cfg.block_size,
        caching,
        bs_p: prefill_cfg.block_size,
        caching_p,
        wants_keys: match spec.kind {
            RouterKind::PrefixAffinity => true,
            RouterKind::Weighted => spec.weights.prefix != 0.0,
            _ => false,
        },
        // A model with a Mamba group: the prefill replica computes the prompt but its last token, which
        // the decode side computes from the state after it (DESIGN.md §Prefill/decode disaggregation,
        // "A Mamba (state) group").
        backoff: i64::from(
            prefill_cfg
                .groups
                .as_ref()
                .is_some_and(crate::kv_groups::Groups::has_mamba),
        ),
        private_from,
        route_d: Router::new(spec.clone()),
        route_p: Router::new(RouterSpec {
            seed: spec.seed.wrapping_add(1),
            ..spec.clone()
        }),
        replica: vec![0; n],
        pre: vec![-1; n],
        pending: vec![RowMap::default(); prefill.len()],
        done_rows: Vec::new(),
        handoffs: Vec::new(),
        handoff_min: i64::MAX,
        remote_of: vec![RowMap::default(); decode.len()],
        undecided: vec![vec![0; decode.len()]; prefill.len()],
        unpushed: vec![0; prefill.len()],
        decided: Vec::new(),
        lb_d: vec![0; decode.len()],
        ne_d: vec![i64::MAX; decode.len()],
        ne_p: vec![i64::MAX; prefill.len()],
        segs: Vec::new(),
        hybrid_keys: SharedKeys::default(),
        keys: Vec::new(),
        keys_p: Vec::new(),
        views_d: vec![Signals::default(); decode.len()],
        views_p: vec![Signals::default(); prefill.len()],
        out: EngineOutput::new(n),
        first: vec![-1; n],
        finish: vec![-1; n],
        decode,
        prefill,
    };
    if blind {
        for lo in (0..n).step_by(BLIND_BATCH) {
            let hi = (lo + BLIND_BATCH).min(n);
            for row in lo..hi {
                every_1024th(row as u64 + 1, cancel)?;
                d.route_blind(row);
            }
            if hi < n {
                d.step_until(inp.arrival_ps[hi], cancel)?;
            }
        }
    } else {
        for row in 0..n {
            every_1024th(row as u64 + 1, cancel)?;
            d.route(row, cancel)?;
        }
    }
    d.finish(cancel)
}
