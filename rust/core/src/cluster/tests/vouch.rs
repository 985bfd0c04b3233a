//! The driver leaves a replica alone while it vouches for what the router reads (`Engine::quiet_through`,
//! DESIGN.md §The stepped replica): the rule itself against replicas really stepped, and the lazy driver
//! against the yardstick that steps every replica to every arrival.

use super::*;

/// The lazy driver against the yardstick that steps every replica to every arrival (`drive(..., lazy =
/// false)`): the same picks, rows and counters; returns how often each stepped a replica (lazy, eager).
fn lazy_matches_eager(
    w: &Cols,
    cfgs: &[EngineConfig],
    spec: &RouterSpec,
    label: &str,
) -> (u64, u64) {
    let cancel = AtomicBool::new(false);
    let (lazy, stepped) = drive(w.view(), cfgs, spec, &cancel, true).unwrap();
    let (eager, all) = drive(w.view(), cfgs, spec, &cancel, false).unwrap();
    assert_eq!(lazy.replica, eager.replica, "{label}");
    assert_same_rows(&lazy.out, &eager.out, label);
    assert_eq!(lazy.counters, eager.counters, "{label}");
    (stepped, all)
}

/// A replica whose steps up to an arrival are all quiet is left where it is (`quiet_through`): the same
/// picks and rows as stepping every replica to every arrival, on dense arrivals (gaps of 0 to 20 ms,
/// ticks of 1 ms, so quiet spans lie between them) over 2 and 4 replicas, every router that reads state.
#[test]
fn leaving_quiet_replicas_alone_changes_nothing() {
    const MS: i64 = 1_000_000_000;
    let gaps = [0, MS, 3 * MS, 7 * MS, 20 * MS];
    for (what, cfg, _) in cases() {
        for (kind, w) in [
            ("plain", workload_with_gaps(150, 21, 0, false, &gaps)),
            ("forks", workload_with_gaps(100, 22, 2, false, &gaps)),
            ("private", private_workload(150, 23, &gaps)),
        ] {
            if kind == "forks" && cfg.policy != Policy::Vllm {
                continue;
            }
            for n in [2, 4] {
                let cfgs = vec![cfg.clone(); n];
                for spec in [
                    RouterSpec::named("least-loaded").unwrap(),
                    RouterSpec::named("least-kv").unwrap(),
                    RouterSpec::named("prefix-affinity").unwrap(),
                    RouterSpec::named("weighted").unwrap(),
                ] {
                    let label = format!("{what}/{kind} n={n} {:?}", spec.kind);
                    lazy_matches_eager(&w, &cfgs, &spec, &label);
                }
            }
        }
    }
}

/// Past 64 replicas the driver finds those due a look a mask of 64 at a time (`Driver::read_exact`): 70
/// replicas, private prompts on dense arrivals (no unit looks up a key, so only the due are looked at),
/// the same picks and rows as stepping every replica to every arrival, and fewer steps.
#[test]
fn seventy_replicas_are_looked_at_in_masks_of_sixty_four() {
    const MS: i64 = 1_000_000_000;
    let cancel = AtomicBool::new(false);
    let w = private_workload(600, 24, &[0, MS / 8, MS / 2]);
    let cfgs = vec![EngineConfig::for_tests(64, 4); 70];
    for name in ["least-loaded", "prefix-affinity"] {
        let spec = RouterSpec::named(name).unwrap();
        let (stepped, all) = lazy_matches_eager(&w, &cfgs, &spec, name);
        assert!(stepped < all, "{name}: {stepped} advances against {all}");
        // Replicas past the first mask got units.
        let c = run_cluster(w.view(), &cfgs, &spec, &cancel).unwrap();
        assert!(c.replica.iter().any(|&r| r >= 64), "{name}");
    }
}

/// The quietness rule itself (`Replica::quiet_through`): replica A, asked about a horizon `h`, vouches
/// for every horizon up to `until` with a running count; replicas B and C, fed the same rows, are
/// stepped to `h` and to `until` and must show what A vouched for (the load: waiting + running + in
/// flight, and where the router reads them the KV counts and the prefix hit of a prompt sharing a
/// prefix). Then A steps to `h` too. Shared prefixes in a small pool (evictions of mapped keys), and
/// prompts all private (rows joining while A vouches), long outputs (block fills and pops), finishes,
/// preemptions (the smallest pool), under ticks and the linear model; the counters show each case
/// was met.
#[test]
#[allow(clippy::too_many_lines)] // one scenario, its cases and its checks
fn a_replica_vouches_only_for_what_stepping_shows() {
    const MS: i64 = 1_000_000_000;
    let cancel = AtomicBool::new(false);
    let gaps = [0, MS / 4, MS, 3 * MS];
    let works = [
        workload_with_gaps(60, 31, 0, false, &gaps),
        private_workload(60, 32, &gaps),
    ];
    let linear = TimeModel::Linear {
        c0_ps: 500_000_000,
        c_tok_ps: 3_000_000,
        c_ctx_ps: 1_000_000,
    };
    let roofline = test_roofline();
    let reads = [
        RouterReads::default(),
        RouterReads {
            kv: true,
            keys: false,
        },
        RouterReads {
            kv: false,
            keys: true,
        },
    ];
    // (vouched, across a finish, across a pop, refused, across a join) over every case.
    let mut seen = [0u64; 5];
    for (blocks, time) in [
        (40, None),
        (24, None),
        (200, None),
        (1000, None),
        (40, Some(linear.clone())),
        (200, Some(linear)),
        (200, Some(roofline)),
    ] {
        let mut cfg = EngineConfig {
            max_num_seqs: 8,
            ..EngineConfig::for_tests(blocks, 4)
        };
        if let Some(t) = &time {
            cfg.time = t.clone();
        }
        // The keys of a prompt on shared prefix 2 (32 tokens) and a tail of its own.
        let mut keys = Vec::new();
        let segs = [Segment::new(2, 32), Segment::new(9_999, 9)];
        BlockTable::lookup_keys(4, &segs, 41, u64::MAX, &mut keys);
        for (work, read) in works.iter().flat_map(|w| reads.map(|r| (w, r))) {
            let (inp, new) = (work.view(), || {
                Replica::new(cfg.clone(), true, false, None).unwrap()
            });
            let pf = private_starts(&inp);
            let (mut lazy, mut stepped) = (new(), new());
            let mut pushed = 0;
            let mut at_h = 0;
            let mut turn = 0u64;
            while at_h < 400 * MS {
                at_h += MS / 3;
                turn += 1;
                // Rows arriving before `at_h` are pushed first (to both).
                while pushed < inp.len() && inp.arrival_ps[pushed] < at_h {
                    lazy.push(&inp, pushed..pushed + 1, &pf);
                    stepped.push(&inp, pushed..pushed + 1, &pf);
                    pushed += 1;
                }
                stepped.advance_until(at_h, &cancel).unwrap();
                match lazy.quiet_through(at_h, read) {
                    Some((until, running)) => {
                        assert!(
                            until >= at_h,
                            "{blocks} {read:?}: until {until} < at_h {at_h}"
                        );
                        // C: the same rows, stepped to `until` (rows arriving after `at_h` are not
                        // pushed yet); every few turns, as it is built afresh.
                        let far = (turn % 5 == 0).then(|| {
                            let mut ahead = new();
                            ahead.push(&inp, 0..pushed, &pf);
                            ahead
                                .advance_until(until.min(at_h + 100 * MS), &cancel)
                                .unwrap();
                            (ahead, until.min(at_h + 100 * MS))
                        });
                        for (rep, at) in
                            [Some((&stepped, at_h)), far.as_ref().map(|(f, u)| (f, *u))]
                                .into_iter()
                                .flatten()
                        {
                            let what = format!("{blocks} {time:?} {read:?} at {at} (asked {at_h})");
                            assert_eq!(
                                rep.waiting() + rep.running() + rep.in_flight(at),
                                lazy.waiting() + running + lazy.in_flight(at_h),
                                "{what}: load"
                            );
                            if read.kv {
                                assert_eq!(rep.kv(), lazy.kv(), "{what}: kv");
                            }
                            if read.keys {
                                let hits = rep.leading_hits(&keys);
                                assert_eq!(hits, lazy.leading_hits(&keys), "{what}: hits");
                            }
                            seen[1] += u64::from(rep.running() < lazy.running());
                            seen[2] += u64::from(rep.kv() != lazy.kv());
                            seen[4] += u64::from(rep.in_flight(at) < lazy.in_flight(at_h));
                        }
                        seen[0] += 1;
                    }
                    None => seen[3] += 1,
                }
                lazy.advance_until(at_h, &cancel).unwrap();
            }
            lazy.finish(&cancel).unwrap();
            stepped.finish(&cancel).unwrap();
            let (oa, ob) = (lazy.take_output(), stepped.take_output());
            assert_same_rows(&oa, &ob, "vouching changes nothing");
            assert_eq!(oa.counters, ob.counters);
        }
    }
    assert!(
        seen.iter().all(|&n| n > 0),
        "vouched, across a finish, a pop, refused, a join: {seen:?}"
    );
}

/// The lazy driver steps replicas far less often than the yardstick on a busy fleet, and picks the
/// same: ticks and linear, shared prefixes, a small pool; and, with prompts all private under ticks
/// (rows join while their replica vouches), least-loaded and prefix-affinity step a replica less
/// than once per unit routed.
#[test]
fn the_lazy_driver_steps_less_and_picks_the_same() {
    const MS: i64 = 1_000_000_000;
    let gaps = [0, MS / 4, MS / 2, MS];
    let private = private_workload(400, 42, &gaps);
    let cfgs = vec![
        EngineConfig {
            max_num_seqs: 64,
            ..EngineConfig::for_tests(2000, 4)
        };
        4
    ];
    for name in ["least-loaded", "prefix-affinity"] {
        let spec = RouterSpec::named(name).unwrap();
        let (stepped, all) = lazy_matches_eager(&private, &cfgs, &spec, &format!("{name} private"));
        assert!(stepped < 400, "{name} private: {stepped} of {all}");
    }
    let w = workload_with_gaps(400, 41, 0, false, &gaps);
    for time in [
        TimeModel::Ticks {
            iteration_ps: MS as u64,
        },
        TimeModel::Linear {
            c0_ps: 500_000_000,
            c_tok_ps: 3_000_000,
            c_ctx_ps: 1_000_000,
        },
        test_roofline(),
    ] {
        let cfg = EngineConfig {
            max_num_seqs: 16,
            time: time.clone(),
            ..EngineConfig::for_tests(120, 4)
        };
        let cfgs = vec![cfg; 4];
        for name in ["least-loaded", "prefix-affinity", "least-kv", "weighted"] {
            let spec = RouterSpec::named(name).unwrap();
            let label = format!("{name} {time:?}");
            let (stepped, all) = lazy_matches_eager(&w, &cfgs, &spec, &label);
            assert!(stepped < all, "{label}: {stepped} of {all}");
            if name != "least-kv" {
                assert!(2 * stepped < all, "{label}: {stepped} of {all}");
            }
        }
    }
}

/// A roofline whose dense term crosses from memory- to compute-bound within a step's tokens, with an
/// experts table and one full-attention class (quiet spans stay affine).
fn test_roofline() -> TimeModel {
    use crate::engine::{AttnClass, AttnKind, Roofline};
    TimeModel::Roofline(Box::new(Roofline {
        fixed_ps: 200_000_000,
        seq_ps: 1_000_000,
        tok_ps: 500_000,
        dense_mem_ps: 300_000_000,
        dense_mem_tok_ps: 10_000,
        dense_flop_tok_ps: 20_000_000,
        moe_mem_ps: vec![0, 50_000_000, 90_000_000, 120_000_000],
        moe_flop_tok_ps: 5_000_000,
        moe_senders: 1,
        head_mem_ps: 40_000_000,
        head_flop_seq_ps: 2_000_000,
        attention: vec![AttnClass {
            kind: AttnKind::Full,
            window: 0,
            kv_ps: 900_000,
            flop_ps: 400_000,
            mixed_kv_ps: 2_000_000,
            prefill_flop_ps: 300_000,
            context_ps: 50_000,
            prefill_kv_ps: 1_500_000,
            context_gemm_ps: 20_000,
            context_flop_ps: 30_000,
            context_weight_ps: 40_000_000,
        }],
    }))
}
