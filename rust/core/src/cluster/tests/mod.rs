//! The driver against whole runs: one replica fed everything is `engine::run`; round-robin over N
//! replicas is N independent runs of the row subsets; the stale view, the replica's signals and ties;
//! the vouching rule and the lazy driver in `vouch`.

use std::sync::atomic::AtomicBool;

use super::*;
use crate::engine::{Preemption, TimeModel, run};

/// Owned input columns (a workload for tests).
#[derive(Clone, Default)]
struct Cols {
    arrival_ps: Vec<i64>,
    prompt_len: Vec<i64>,
    target: Vec<i64>,
    max_gen: Vec<i64>,
    fork_parent: Vec<i64>,
    output_seg: Vec<u64>,
    seg_offsets: Vec<i64>,
    segment_id: Vec<u64>,
    segment_len: Vec<i64>,
}

impl Cols {
    fn view(&self) -> EngineInput<'_> {
        EngineInput {
            arrival_ps: &self.arrival_ps,
            prompt_len: &self.prompt_len,
            target: &self.target,
            max_gen: &self.max_gen,
            fork_parent: &self.fork_parent,
            output_seg: &self.output_seg,
            seg_offsets: &self.seg_offsets,
            segment_id: &self.segment_id,
            segment_len: &self.segment_len,
        }
    }

    /// The rows `rows` (whole units, in order) as a workload of their own.
    fn subset(&self, rows: &[usize]) -> Cols {
        let mut c = Cols {
            seg_offsets: vec![0],
            ..Cols::default()
        };
        let forks = !self.fork_parent.is_empty();
        for (local, &i) in rows.iter().enumerate() {
            c.arrival_ps.push(self.arrival_ps[i]);
            c.prompt_len.push(self.prompt_len[i]);
            c.target.push(self.target[i]);
            c.max_gen.push(self.max_gen[i]);
            c.output_seg.push(self.output_seg[i]);
            let (lo, hi) = (
                self.seg_offsets[i] as usize,
                self.seg_offsets[i + 1] as usize,
            );
            c.segment_id.extend_from_slice(&self.segment_id[lo..hi]);
            c.segment_len.extend_from_slice(&self.segment_len[lo..hi]);
            c.seg_offsets.push(c.segment_id.len() as i64);
            if forks {
                let p = self.fork_parent[i];
                c.fork_parent.push(if p >= 0 {
                    (local - (i - p as usize)) as i64
                } else {
                    -1
                });
            }
        }
        c
    }
}

/// `n` requests: bursts and gaps of arrivals, prompts of one of three shared prefixes and a private
/// tail, some requests with `samples` fork-cow samples (0: none), some quoting an earlier output.
fn workload(n: usize, seed: u64, samples: usize, quote: bool) -> Cols {
    workload_with_gaps(
        n,
        seed,
        samples,
        quote,
        &[0, 0, 300_000_000, 2_000_000_000, 9_000_000_000],
    )
}

/// `workload` with arrival gaps drawn from `gaps` (picoseconds).
fn workload_with_gaps(n: usize, seed: u64, samples: usize, quote: bool, gaps: &[i64]) -> Cols {
    generate(n, seed, samples, quote, gaps, true)
}

/// `workload_with_gaps` with every prompt its own (no shared prefix: nothing a prefix map can hit)
/// and outputs of up to 300 tokens.
fn private_workload(n: usize, seed: u64, gaps: &[i64]) -> Cols {
    generate(n, seed, 0, false, gaps, false)
}

fn generate(n: usize, seed: u64, samples: usize, quote: bool, gaps: &[i64], shared: bool) -> Cols {
    let mut rng = SplitMix64(seed);
    let mut c = Cols {
        seg_offsets: vec![0],
        ..Cols::default()
    };
    let mut t = 0i64;
    for r in 0..n as u64 {
        t += gaps[rng.below(gaps.len())];
        let shared_len = 8 + 8 * rng.below(4) as i64;
        let own = 1 + rng.below(30) as i64;
        let target = 1 + rng.below(if shared { 40 } else { 300 }) as i64;
        let prefix = 1 + rng.below(3) as u64;
        let mut segs = if shared {
            vec![(prefix, shared_len), (1000 + r, own)]
        } else {
            vec![(1000 + r, shared_len + own)]
        };
        if quote && r > 0 && rng.below(3) == 0 {
            segs.push((OUTPUT_BIT | ((r - 1) << 16), 1));
        }
        let k = if samples > 0 && rng.below(3) == 0 {
            samples
        } else {
            0
        };
        let parent = c.arrival_ps.len() as i64;
        for s in 0..=k as u64 {
            c.arrival_ps.push(t);
            c.prompt_len.push(segs.iter().map(|x| x.1).sum());
            c.target.push(target);
            c.max_gen.push(target + 5);
            c.fork_parent.push(if s == 0 { -1 } else { parent });
            c.output_seg.push(OUTPUT_BIT | (r << 16) | s);
            for &(id, len) in &segs {
                c.segment_id.push(id);
                c.segment_len.push(len);
            }
            c.seg_offsets.push(c.segment_id.len() as i64);
        }
    }
    if samples == 0 {
        c.fork_parent.clear();
    }
    c
}

fn configs() -> Vec<(&'static str, EngineConfig)> {
    let base = EngineConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 64,
        ..EngineConfig::for_tests(40, 4)
    };
    vec![
        ("caching", base.clone()),
        (
            "no caching, linear",
            EngineConfig {
                enable_prefix_caching: false,
                time: TimeModel::Linear {
                    c0_ps: 500_000_000,
                    c_tok_ps: 3_000_000,
                    c_ctx_ps: 1_000_000,
                },
                ..base.clone()
            },
        ),
        (
            "swap",
            EngineConfig {
                preemption: Preemption::Auto,
                cpu_blocks: 16,
                swap_ps_per_block: 1_000_000,
                num_blocks: 30,
                ..base.clone()
            },
        ),
        (
            "v0 checks",
            EngineConfig {
                one_free_block: true,
                watermark_blocks: 2,
                chunked_prefill: false,
                skip_over_budget: true,
                full_prompt_gate: true,
                ..base.clone()
            },
        ),
        (
            "reserve",
            EngineConfig {
                policy: Policy::Reserve,
                ..base.clone()
            },
        ),
        (
            "orca-max",
            EngineConfig {
                policy: Policy::OrcaMax,
                max_num_batched_tokens: 8192,
                num_blocks: 100,
                ..base
            },
        ),
    ]
}

fn assert_same_rows(a: &EngineOutput, b: &EngineOutput, what: &str) {
    assert_eq!(
        a.first_scheduled, b.first_scheduled,
        "{what}: first_scheduled"
    );
    assert_eq!(a.first_token, b.first_token, "{what}: first_token");
    assert_eq!(a.finish, b.finish, "{what}: finish");
    assert_eq!(a.generated, b.generated, "{what}: generated");
    assert_eq!(a.num_preemptions, b.num_preemptions, "{what}: preemptions");
    assert_eq!(a.num_swaps, b.num_swaps, "{what}: swaps");
    assert_eq!(a.cached_tokens, b.cached_tokens, "{what}: cached");
    assert_eq!(
        a.recomputed_tokens, b.recomputed_tokens,
        "{what}: recomputed"
    );
    assert_eq!(a.status, b.status, "{what}: status");
    assert_eq!(a.reject_reason, b.reject_reason, "{what}: reason");
}

/// Every config and workload kind: (name, config, workload).
fn cases() -> Vec<(String, EngineConfig, Cols)> {
    let mut out = Vec::new();
    for (name, cfg) in configs() {
        let paged = cfg.policy.is_paged();
        for (kind, w) in [
            ("plain", workload(120, 7, 0, false)),
            ("quoting", workload(120, 8, 0, true)),
            ("forks", workload(80, 9, 2, false)),
        ] {
            if kind == "forks" && (!paged || cfg.policy != Policy::Vllm) {
                continue;
            }
            out.push((format!("{name}/{kind}"), cfg.clone(), w));
        }
    }
    out
}

#[test]
fn one_replica_fed_everything_is_the_whole_run() {
    let cancel = AtomicBool::new(false);
    for (what, cfg, w) in cases() {
        let whole = run(w.view(), &cfg, 0, false, &cancel).unwrap();
        assert!(whole.status.iter().all(|&s| s >= 0), "{what}");
        // Routers that read state step the replica to every arrival; round-robin never does; a stale
        // view steps it to the refresh instants.
        for spec in [
            RouterSpec::named("round-robin").unwrap(),
            RouterSpec::named("least-loaded").unwrap(),
            RouterSpec::named("prefix-affinity").unwrap(),
            RouterSpec::new("weighted", 0, 700_000_000, 1.5, None).unwrap(),
        ] {
            let c = run_cluster(w.view(), std::slice::from_ref(&cfg), &spec, &cancel).unwrap();
            let label = format!("{what} {:?}", spec.kind);
            assert_same_rows(&c.out, &whole, &label);
            assert_eq!(c.counters, std::slice::from_ref(&whole.counters), "{label}");
            assert!(c.replica.iter().all(|&r| r == 0));
        }
    }
}

#[test]
fn round_robin_is_independent_runs_of_the_row_subsets() {
    let cancel = AtomicBool::new(false);
    for (what, cfg, w) in cases() {
        for n in [2usize, 3] {
            // Heterogeneous: replica r has r x 8 more blocks (and, for paged, block size 4 or 8).
            let cfgs: Vec<EngineConfig> = (0..n)
                .map(|r| EngineConfig {
                    num_blocks: cfg.num_blocks + 8 * r as u32,
                    block_size: if cfg.policy.is_paged() && r == 1 {
                        8
                    } else {
                        4
                    },
                    ..cfg.clone()
                })
                .collect();
            let c = run_cluster(
                w.view(),
                &cfgs,
                &RouterSpec::named("round-robin").unwrap(),
                &cancel,
            )
            .unwrap();
            // Unit k goes to replica k mod n.
            let inp = w.view();
            let (mut i, mut k) = (0, 0);
            while i < inp.len() {
                let j = unit_end(&inp, i);
                assert!(c.replica[i..j].iter().all(|&r| r == (k % n) as i64));
                i = j;
                k += 1;
            }
            for (r, rcfg) in cfgs.iter().enumerate() {
                let rows: Vec<usize> = (0..inp.len())
                    .filter(|&i| c.replica[i] == r as i64)
                    .collect();
                let sub = w.subset(&rows);
                let alone = run(sub.view(), rcfg, 0, false, &cancel).unwrap();
                let label = format!("{what} n={n} replica {r}");
                assert_same_rows(&rows_of(&c.out, &rows), &alone, &label);
                assert_eq!(c.counters[r], alone.counters, "{label}");
            }
        }
    }
}

/// The output columns of `rows` of `out`, in that order.
fn rows_of(out: &EngineOutput, rows: &[usize]) -> EngineOutput {
    let mut mine = EngineOutput::default();
    macro_rules! pick {
        ($col:ident, $init:expr) => {
            mine.$col = rows.iter().map(|&i| out.$col[i]).collect();
        };
    }
    crate::engine::for_each_row_column!(pick);
    mine
}

/// Whatever the router, a replica's rows come out as a run of its rows alone would give them; in a
/// long run of routers that step the replicas, most rows move to the fleet's columns while it runs
/// (`Replica::drain_done`), the rest at the end.
#[test]
fn a_long_fleet_moves_its_done_rows_out_exactly() {
    let cancel = AtomicBool::new(false);
    let w = workload(6000, 21, 0, false);
    let cfgs: Vec<EngineConfig> = (0..3)
        .map(|r| EngineConfig {
            num_blocks: 300 + 40 * r,
            ..EngineConfig::for_tests(64, 4)
        })
        .collect();
    for name in ["least-loaded", "prefix-affinity", "least-kv"] {
        let c = run_cluster(w.view(), &cfgs, &RouterSpec::named(name).unwrap(), &cancel).unwrap();
        for (r, cfg) in cfgs.iter().enumerate() {
            let rows: Vec<usize> = (0..w.view().len())
                .filter(|&i| c.replica[i] == r as i64)
                .collect();
            assert!(
                rows.len() > 1000,
                "{name}: replica {r} has {} rows",
                rows.len()
            );
            let alone = run(w.subset(&rows).view(), cfg, 0, false, &cancel).unwrap();
            let label = format!("{name} replica {r}");
            assert_same_rows(&rows_of(&c.out, &rows), &alone, &label);
            assert_eq!(c.counters[r], alone.counters, "{label}");
        }
    }
}

#[test]
fn random_routing_follows_the_splitmix64_stream() {
    let cancel = AtomicBool::new(false);
    let w = workload(50, 3, 0, false);
    let cfgs = vec![EngineConfig::for_tests(64, 4); 3];
    let spec = RouterSpec::new("random", 42, 0, 1.5, None).unwrap();
    let c = run_cluster(w.view(), &cfgs, &spec, &cancel).unwrap();
    let mut rng = SplitMix64(42);
    let expected: Vec<i64> = (0..50).map(|_| rng.below(3) as i64).collect();
    assert_eq!(c.replica, expected);
}

/// With a refresh period longer than the whole run, every unit sees the snapshot at 0 (every replica
/// empty) plus what the router sent since: least-loaded settling ties low then deals units out like
/// round-robin.
#[test]
fn a_stale_view_counts_what_was_routed_since_the_snapshot() {
    let cancel = AtomicBool::new(false);
    let w = workload(60, 5, 0, false);
    let cfgs = vec![EngineConfig::for_tests(64, 4); 3];
    let rr = run_cluster(
        w.view(),
        &cfgs,
        &RouterSpec::named("round-robin").unwrap(),
        &cancel,
    )
    .unwrap();
    let stale = RouterSpec::new("least-loaded", 0, i64::MAX / 4, 1.5, None)
        .unwrap()
        .with_tie_break(TieBreak::Lowest);
    let c = run_cluster(w.view(), &cfgs, &stale, &cancel).unwrap();
    assert_eq!(c.replica, rr.replica);
    // The exact view sees requests finish, so it deals them out differently.
    let exact_spec = RouterSpec::named("least-loaded")
        .unwrap()
        .with_tie_break(TieBreak::Lowest);
    let exact = run_cluster(w.view(), &cfgs, &exact_spec, &cancel).unwrap();
    assert_ne!(exact.replica, rr.replica);
}

/// Prefix affinity sends requests sharing a prefix to the replica that cached it, while the load cap
/// allows; round-robin scatters them (fewer cached tokens).
#[test]
fn prefix_affinity_finds_the_cached_prefix() {
    let cancel = AtomicBool::new(false);
    let w = workload(200, 11, 0, false);
    let cfgs = vec![
        EngineConfig {
            num_blocks: 200,
            ..EngineConfig::for_tests(64, 4)
        };
        4
    ];
    let total = |spec: &RouterSpec| -> i64 {
        run_cluster(w.view(), &cfgs, spec, &cancel)
            .unwrap()
            .out
            .cached_tokens
            .iter()
            .sum()
    };
    let affinity = total(&RouterSpec::named("prefix-affinity").unwrap());
    let rr = total(&RouterSpec::named("round-robin").unwrap());
    assert!(affinity > rr, "affinity {affinity} vs round-robin {rr}");
}

/// The signals after `advance_until`: one replica, ticks of 1 ms, 4 seats. Rows: five at 1 ms (prompt
/// 4, 10 tokens each) and two at 3.5 ms.
#[test]
fn a_replica_reports_its_signals_at_the_horizon() {
    const MS: i64 = 1_000_000_000;
    let cancel = AtomicBool::new(false);
    let mut c = workload(0, 0, 0, false);
    for (r, a) in [MS, MS, MS, MS, MS, 7 * MS / 2, 7 * MS / 2]
        .into_iter()
        .enumerate()
    {
        c.arrival_ps.push(a);
        c.prompt_len.push(4);
        c.target.push(10);
        c.max_gen.push(10);
        c.output_seg.push(OUTPUT_BIT | ((r as u64) << 16));
        c.segment_id.push(100 + r as u64);
        c.segment_len.push(4);
        c.seg_offsets.push(c.segment_id.len() as i64);
    }
    let cfg = EngineConfig {
        max_num_seqs: 4,
        enable_prefix_caching: false,
        ..EngineConfig::for_tests(64, 4)
    };
    let inp = c.view();
    let mut rep = Replica::new(cfg, true, false, None).unwrap();
    for i in 0..5 {
        rep.push(&inp, i..i + 1, &[]);
    }
    // Nothing has joined at 0 before a step starts there: five rows in flight.
    // An idle replica whose next row arrives at its horizon stays put: the rows are in flight.
    rep.advance_until(MS, &cancel).unwrap();
    assert_eq!((rep.waiting(), rep.running(), rep.in_flight(MS)), (0, 0, 5));
    assert_eq!(rep.kv(), (0, 63));
    // Advancing past it joins them before the step at 0.
    // The step at 1 ms admits four (one block each), the fifth waits for a seat; the step at 2 ms
    // decodes (it starts before the horizon 2 ms + 1).
    rep.advance_until(2 * MS + 1, &cancel).unwrap();
    assert_eq!(
        (rep.waiting(), rep.running(), rep.in_flight(2 * MS)),
        (1, 4, 0)
    );
    assert_eq!(rep.kv(), (8, 63)); // 4 + 2 tokens each after the step at 2 ms: two blocks
    // Rows at 3.5 ms pushed while the replica's clock is at 3 ms: in flight until it advances.
    rep.push(&inp, 5..6, &[]);
    rep.push(&inp, 6..7, &[]);
    assert_eq!(rep.in_flight(7 * MS / 2), 2);
    assert_eq!(rep.in_flight(3 * MS), 0);
    // The step at 3 ms starts before 3.5 ms and ends at 4 ms: the replica was mid-step at their
    // arrival, so they stay in flight; they join the step at 4 ms, which starts after the horizon (as
    // in the reference: nothing of a step at or after the horizon happens, its arrivals' join neither).
    rep.advance_until(7 * MS / 2, &cancel).unwrap();
    assert_eq!((rep.waiting(), rep.in_flight(7 * MS / 2)), (1, 2));
    rep.advance_until(4 * MS + 1, &cancel).unwrap();
    assert_eq!(rep.in_flight(4 * MS), 0);
    rep.finish(&cancel).unwrap();
    let out = rep.take_output();
    assert!(out.status.iter().all(|&s| s == 0));
}

#[test]
fn a_bad_cluster_is_refused_naming_the_field() {
    let cancel = AtomicBool::new(false);
    let w = workload(5, 1, 0, false);
    let spec = RouterSpec::named("round-robin").unwrap();
    let err = run_cluster(w.view(), &[], &spec, &cancel).unwrap_err();
    assert!(err.to_string().contains("configs"), "{err}");
    let bad = EngineConfig {
        num_blocks: 1,
        ..EngineConfig::for_tests(64, 4)
    };
    let err = run_cluster(
        w.view(),
        &[EngineConfig::for_tests(64, 4), bad],
        &spec,
        &cancel,
    )
    .unwrap_err();
    assert!(err.to_string().contains("replica 1: num_blocks 1"), "{err}");
    let forks = workload(10, 2, 1, false);
    let contiguous = EngineConfig {
        policy: Policy::OrcaMax,
        ..EngineConfig::for_tests(64, 4)
    };
    let err = run_cluster(forks.view(), &[contiguous], &spec, &cancel).unwrap_err();
    assert!(err.to_string().contains("fork-cow"), "{err}");
}

/// Compaction keeps the input proportional to the rows in flight, and the run identical.
#[test]
fn a_long_run_compacts_its_input() {
    let cancel = AtomicBool::new(false);
    let w = workload(5000, 13, 0, false);
    let cfg = EngineConfig {
        num_blocks: 400,
        ..EngineConfig::for_tests(64, 4)
    };
    let whole = run(w.view(), &cfg, 0, false, &cancel).unwrap();
    let spec = RouterSpec::named("least-loaded").unwrap();
    let c = run_cluster(w.view(), std::slice::from_ref(&cfg), &spec, &cancel).unwrap();
    assert_same_rows(&c.out, &whole, "compacted");
    assert_eq!(c.counters[0], whole.counters);
    let mut rep = Replica::new(cfg, true, false, None).unwrap();
    let inp = w.view();
    let pf = private_starts(&inp);
    for i in 0..inp.len() {
        rep.advance_until(inp.arrival_ps[i], &cancel).unwrap();
        rep.push(&inp, i..i + 1, &pf);
    }
    assert!(
        rep.first_held_row() > 3000,
        "compacted up to row {}",
        rep.first_held_row()
    );
    // The done rows' output moves out the same way, each to its row.
    let mut moved = EngineOutput::new(inp.len());
    rep.drain_done(&mut moved);
    let first = rep.rows_held()[0];
    assert!(first > 3000, "output moved up to row {first}");
    let done: Vec<usize> = (0..first).collect();
    assert_same_rows(&rows_of(&moved, &done), &rows_of(&whole, &done), "moved");
    // Groups across compactions (samples kept while their parent's input is gone), swap and quoting.
    let cfg = EngineConfig {
        num_blocks: 300,
        preemption: Preemption::Auto,
        cpu_blocks: 64,
        ..EngineConfig::for_tests(64, 4)
    };
    for w in [workload(3000, 14, 2, false), workload(3000, 15, 0, true)] {
        let whole = run(w.view(), &cfg, 0, false, &cancel).unwrap();
        let c = run_cluster(w.view(), std::slice::from_ref(&cfg), &spec, &cancel).unwrap();
        assert_same_rows(&c.out, &whole, "compacted groups");
        assert_eq!(c.counters[0], whole.counters);
    }
}

/// Under light load every replica is idle at every arrival (one request a second, each done in under
/// 50 ms): every unit is a tie among all replicas for least-loaded, least-kv and a weighted router
/// without the prefix scorer. Drawn (`random`, the default), the picks are the `router_seed` stream's
/// draws `(z * 4) >> 64`, one per unit, as the random router's, and spread evenly; settled low they all
/// go to replica 0 (what every router did before ties were drawn); by `round-robin`, unit k to k mod 4.
#[test]
fn ties_under_light_load_are_drawn_from_the_seeded_stream() {
    const S: i64 = 1_000_000_000_000;
    let cancel = AtomicBool::new(false);
    let w = workload_with_gaps(400, 31, 0, false, &[S]);
    let cfgs = vec![EngineConfig::for_tests(64, 4); 4];
    let no_prefix = [("queue".to_string(), 1.0), ("kv".to_string(), 1.0)];
    let zero = [("kv".to_string(), 0.0)];
    for spec in [
        RouterSpec::new("least-loaded", 7, 0, 1.5, None).unwrap(),
        RouterSpec::new("least-kv", 7, 0, 1.5, None).unwrap(),
        RouterSpec::new("weighted", 7, 0, 1.5, Some(&no_prefix)).unwrap(),
        RouterSpec::new("weighted", 7, 0, 1.5, Some(&zero)).unwrap(),
    ] {
        let label = format!("{:?} {:?}", spec.kind, spec.weights);
        let drawn = run_cluster(w.view(), &cfgs, &spec, &cancel).unwrap();
        let mut rng = SplitMix64(7);
        let stream: Vec<i64> = (0..400).map(|_| rng.below(4) as i64).collect();
        assert_eq!(drawn.replica, stream, "{label}");
        let mut units = [0u32; 4];
        for &r in &drawn.replica {
            units[r as usize] += 1;
        }
        let max = *units.iter().max().unwrap();
        assert!(
            f64::from(max) / 100.0 < 1.25,
            "{label}: units per replica {units:?}"
        );
        let low = spec.clone().with_tie_break(TieBreak::Lowest);
        let lowest = run_cluster(w.view(), &cfgs, &low, &cancel).unwrap();
        assert!(lowest.replica.iter().all(|&r| r == 0), "{label}");
        let turns = spec.clone().with_tie_break(TieBreak::RoundRobin);
        let turns = run_cluster(w.view(), &cfgs, &turns, &cancel).unwrap();
        assert!(
            turns
                .replica
                .iter()
                .enumerate()
                .all(|(k, &r)| r == k as i64 % 4),
            "{label}"
        );
        assert!(
            drawn.out.status.iter().all(|&s| s == 0),
            "{label}: every request finishes"
        );
    }
}

/// A tie draws; a unique best does not: the stream advances only at ties, one draw each, in order (an
/// idle fleet's tie, two picks with one least-loaded replica, then a tie again gets the second draw).
#[test]
fn only_ties_consume_draws() {
    let mut router = Router::new(RouterSpec::new("least-loaded", 3, 0, 1.5, None).unwrap());
    let idle = [Signals::default(); 3];
    let busy = |r: usize| {
        let mut v = [Signals::default(); 3];
        for (i, s) in v.iter_mut().enumerate() {
            s.waiting = if i == r { 0 } else { 2 };
        }
        v
    };
    let mut rng = SplitMix64(3);
    let first = rng.below(3);
    let second = rng.below(3);
    assert_eq!(router.pick(3, &idle), first);
    assert_eq!(router.pick(3, &busy(2)), 2);
    assert_eq!(router.pick(3, &busy(0)), 0);
    assert_eq!(router.pick(3, &idle), second);
}

mod pd;
mod vouch;
