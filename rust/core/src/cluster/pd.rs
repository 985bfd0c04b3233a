//! A disaggregated fleet (DESIGN.md §Prefill/decode disaggregation): decode replicas and a prefill pool
//! on one clock. Each unit's decode replica is picked first; unless the prompt part not cached there is
//! under the threshold, a prefill replica is picked too and runs it to its first token; at that finish
//! it joins its decode replica as a remote request, whose full blocks come over the decode replica's
//! inbound link into the held queue (`engine/offload.rs`). Every replica is stepped to every arrival,
//! unless no decision reads a replica (`route_blind`: every row routed first).
//! The reference's twin is `kvsim.reference.cluster._run_pd`.

use std::sync::atomic::AtomicBool;

use super::{
    ClusterOutput, Replica, Router, RouterKind, RouterSpec, Signals, every_1024th, validate,
};
use crate::block_table::BlockTable;
use crate::engine::{
    EngineConfig, EngineInput, EngineOutput, OUTPUT_BIT, Policy, Preemption, for_each_row_column,
    private_starts,
};
use crate::{BlockKey, Result, Segment, invalid_arg};

/// A hand-off's prefill replica for a row the route-first drive prefills on its decode replica.
const LOCAL: usize = usize::MAX;

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
    let mut all = cfgs.to_vec();
    all.extend(std::iter::repeat_n(
        prefill_cfg.clone(),
        pd.prefill_replicas,
    ));
    validate(inp, &all)?;
    if prefill_cfg.groups.is_some() {
        invalid_arg!(
            "prefill_config: a hybrid model's transfer (several KV-cache groups) is not modelled"
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
    let c = &cfgs[0];
    if c.tier.is_some() {
        invalid_arg!("cpu_tier: a CPU tier is not modelled with a prefill pool");
    }
    if c.policy != Policy::Vllm
        || c.preemption != Preemption::Recompute
        || c.skip_over_budget
        || c.one_free_block
        || !c.watermark_while_running
        || c.groups.is_some()
    {
        invalid_arg!(
            "a disaggregated fleet's decode replicas take vLLM v1's rules: policy 'vllm', preemption 'recompute', waiting_over_budget 'stop', append_check 'exact', watermark_rule 'while-running', one full-attention group"
        );
    }
    Ok(())
}

/// What a router reads of `rep` at the instant it was stepped to (`a`), with the unit's prefix hits on
/// it (`keys`: its prompt's lookup keys at the replica's block size).
fn signals(rep: &Replica, a: i64, keys: &[BlockKey], prompt: u64) -> Signals {
    let (kv_used, kv_total) = rep.kv();
    let bs = rep.config().block_size;
    Signals {
        waiting: rep.waiting(),
        running: rep.running(),
        in_flight: rep.in_flight(a),
        kv_used,
        kv_total,
        hit_blocks: if keys.is_empty() {
            0
        } else {
            rep.leading_hits(keys)
        },
        lookup_blocks: prompt.saturating_sub(1) / bs,
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
    private_from: Vec<u64>,
    decode: Vec<Replica>,
    prefill: Vec<Replica>,
    route_d: Router,
    route_p: Router,
    /// The route-first drive's rows of each prefill replica, in push order (a replica's rows held are
    /// its `rows_held`).
    rows_p: Vec<Vec<usize>>,
    replica: Vec<i64>,
    pre: Vec<i64>,
    /// Per prefill replica: (its row, the input row, the decode replica) of each request in flight
    /// (the interleaved drive's).
    pending: Vec<Vec<(usize, usize, usize)>>,
    /// Known hand-offs not yet delivered: (prefill finish, prefill replica, input row, decode replica);
    /// the route-first drive also keeps its locally prefilled rows here (arrival, `LOCAL`, row, replica).
    handoffs: Vec<(i64, usize, usize, usize)>,
    segs: Vec<Segment>,
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

/// The prefill requests of prefill replica `p` (`rep`) done so far: their first schedule and finish
/// recorded, the finished ones become hand-offs (rejected ones keep their prefill output).
fn collect_from(
    rep: &Replica,
    p: usize,
    pending: &mut Vec<(usize, usize, usize)>,
    handoffs: &mut Vec<(i64, usize, usize, usize)>,
    first: &mut [i64],
    finish: &mut [i64],
) {
    pending.retain(|&(k, row, d)| {
        let (status, f0, f1) = rep.row_outcome(k);
        if status < 0 {
            return true;
        }
        first[row] = f0;
        finish[row] = f1;
        if status == crate::engine::FINISHED {
            handoffs.push((f1, p, row, d));
        }
        false
    });
}

impl PdDriver<'_, '_> {
    /// The prefill requests finished so far become hand-offs (rejected ones keep their prefill output).
    fn collect(&mut self) {
        for (p, rep) in self.prefill.iter().enumerate() {
            collect_from(
                rep,
                p,
                &mut self.pending[p],
                &mut self.handoffs,
                &mut self.first,
                &mut self.finish,
            );
        }
    }

    /// Every hand-off finished at or before `limit` (None: all) joins its decode replica, in order of
    /// finish, prefill replica and row.
    fn deliver(&mut self, limit: Option<i64>) {
        self.handoffs.sort_unstable();
        let mut i = 0;
        while i < self.handoffs.len() && limit.is_none_or(|a| self.handoffs[i].0 <= a) {
            let (f, p, row, d) = self.handoffs[i];
            if p == LOCAL {
                self.decode[d].push(&self.inp, row..row + 1, &self.private_from);
            } else {
                self.decode[d].push_pd(&self.inp, row, &self.private_from, Some(f), false, true);
            }
            i += 1;
        }
        self.handoffs.drain(..i);
    }

    /// Routes `row`, arriving at `a`: both pools stepped to `a` (hand-offs up to `a` joined first), its
    /// decode replica picked, then, unless it prefills there, its prefill replica.
    fn route(&mut self, row: usize, cancel: &AtomicBool) -> Result<()> {
        let inp = self.inp;
        let a = inp.arrival_ps[row];
        for rep in &mut self.prefill {
            rep.advance_until(a, cancel)?;
        }
        self.collect();
        // Collected rows are read no more: the rejected ones' output moves to the fleet's columns.
        for rep in &mut self.prefill {
            rep.drain_done_if(&mut self.out, |s| s != crate::engine::FINISHED);
        }
        self.deliver(Some(a));
        for rep in &mut self.decode {
            rep.advance_until(a, cancel)?;
            rep.drain_done(&mut self.out);
        }
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
        let router_keys: &[BlockKey] = if self.wants_keys { &self.keys } else { &[] };
        for (v, rep) in self.views_d.iter_mut().zip(&self.decode) {
            *v = signals(rep, a, router_keys, prompt);
        }
        let d = self.route_d.pick(self.decode.len(), &self.views_d);
        self.replica[row] = d as i64;
        let hits = if self.keys.is_empty() {
            0
        } else {
            self.decode[d].leading_hits(&self.keys)
        };
        if prompt - hits * self.bs < self.pd.threshold_tokens {
            self.decode[d].push(&inp, row..row + 1, &self.private_from);
            return Ok(());
        }
        for (v, rep) in self.views_p.iter_mut().zip(&self.prefill) {
            *v = signals(rep, a, &self.keys_p, prompt);
        }
        let p = self.route_p.pick(self.prefill.len(), &self.views_p);
        self.prefill[p].push_pd(&inp, row, &self.private_from, None, true, false);
        self.pending[p].push((self.prefill[p].len() - 1, row, d));
        self.pre[row] = p as i64;
        Ok(())
    }

    /// Routes `row` without stepping a replica (the route-first drive: `blind`): the routers read
    /// nothing and no decode replica's prefix hits are read, so the picks and the threshold's choice do
    /// not depend on the replicas' state. A row prefilled locally waits among the hand-offs, at its
    /// arrival after every hand-off finished then (`LOCAL` sorts after every prefill replica), so each
    /// decode replica gets its rows in the interleaved drive's order. The prefill replicas get their
    /// rows in `finish`, one replica at a time.
    fn route_blind(&mut self, row: usize) {
        let inp = self.inp;
        let d = self.route_d.pick(self.decode.len(), &[]);
        self.replica[row] = d as i64;
        if (inp.prompt_len[row] as u64) < self.pd.threshold_tokens {
            self.handoffs.push((inp.arrival_ps[row], LOCAL, row, d));
            return;
        }
        let p = self.route_p.pick(self.prefill.len(), &[]);
        self.rows_p[p].push(row);
        self.pre[row] = p as i64;
    }

    /// Runs the prefill pool to its end, hands its last requests off, runs the decode pool to its end
    /// and gathers the rows. One replica at a time: a prefill replica (given its rows now in the
    /// route-first drive) runs to its end, its hand-offs are collected and the output of the rows it
    /// rejected kept, and it is dropped; then each decode replica gets its remaining hand-offs (in the
    /// order `deliver` gives them), runs to its end, its rows are gathered, and it is dropped. A replica
    /// runs alone once every replica's pushes are known, so the results are those of running them side
    /// by side, with one replica's input and state in memory at a time (DESIGN.md §Cluster).
    /// `blind`: the route-first drive, whose prefill replicas get their rows here.
    fn finish(mut self, blind: bool, cancel: &AtomicBool) -> Result<PdOutput> {
        let mut out = std::mem::take(&mut self.out);
        let mut counters_p = Vec::with_capacity(self.prefill.len());
        if blind {
            // Every prefilled row may become a hand-off: one allocation, not a doubling's two.
            self.handoffs
                .reserve_exact(self.rows_p.iter().map(Vec::len).sum());
        }
        let prefill = std::mem::take(&mut self.prefill);
        for (p, mut rep) in prefill.into_iter().enumerate() {
            let rows = std::mem::take(&mut self.rows_p[p]);
            if blind {
                for (k, &row) in rows.iter().enumerate() {
                    every_1024th(k as u64 + 1, cancel)?;
                    rep.push_pd(&self.inp, row, &self.private_from, None, true, false);
                }
            }
            rep.finish(cancel)?;
            for (k, &row) in rows.iter().enumerate() {
                let (status, f0, f1) = rep.row_outcome(k);
                self.first[row] = f0;
                self.finish[row] = f1;
                if status == crate::engine::FINISHED {
                    self.handoffs.push((f1, p, row, self.replica[row] as usize));
                }
            }
            drop(rows);
            collect_from(
                &rep,
                p,
                &mut self.pending[p],
                &mut self.handoffs,
                &mut self.first,
                &mut self.finish,
            );
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
        // `deliver`'s order, (finish, prefill replica, row), within each decode replica.
        self.handoffs
            .sort_unstable_by_key(|&(f, p, row, d)| (d, f, p, row));
        let mut counters = Vec::with_capacity(self.decode.len() + counters_p.len());
        let decode = std::mem::take(&mut self.decode);
        let mut at = 0;
        for (d, mut rep) in decode.into_iter().enumerate() {
            while at < self.handoffs.len() && self.handoffs[at].3 == d {
                let (f, p, row, _) = self.handoffs[at];
                if p == LOCAL {
                    rep.push(&self.inp, row..row + 1, &self.private_from);
                } else {
                    rep.push_pd(&self.inp, row, &self.private_from, Some(f), false, true);
                }
                at += 1;
                every_1024th(at as u64, cancel)?;
            }
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
        self.handoffs = Vec::new();
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
        prefill.push(Replica::new(
            prefill_cfg.clone(),
            defer_keys,
            false,
            Some(cancel),
        )?);
    }
    // The route-first drive when no decision reads a replica (DESIGN.md §Prefill/decode
    // disaggregation): every row routed, then each pool run to its end, with no replica cut at every
    // arrival of the fleet.
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
        private_from,
        route_d: Router::new(spec.clone()),
        route_p: Router::new(RouterSpec {
            seed: spec.seed.wrapping_add(1),
            ..spec.clone()
        }),
        rows_p: vec![Vec::new(); prefill.len()],
        replica: vec![0; n],
        pre: vec![-1; n],
        pending: vec![Vec::new(); prefill.len()],
        handoffs: Vec::new(),
        segs: Vec::new(),
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
    for row in 0..n {
        every_1024th(row as u64 + 1, cancel)?;
        if blind {
            d.route_blind(row);
        } else {
            d.route(row, cancel)?;
        }
    }
    d.finish(blind, cancel)
}
