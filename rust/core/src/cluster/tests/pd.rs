//! The disaggregated fleet (`cluster/pd.rs`): with every request prefilled locally it is the aggregated
//! fleet of its decode replicas; with every request disaggregated each finished request got its first
//! token on a prefill replica before its decode replica's, and the links carried what the counters say;
//! what is not modelled is refused. (The Python differential tests hold it to the reference.)

use super::*;
use crate::cluster::pd::{PdSpec, run_pd};
use crate::engine::TimeModel;

fn pd(threshold: u64) -> PdSpec {
    PdSpec {
        prefill_replicas: 2,
        threshold_tokens: threshold,
        link_latency_ps: 50_000_000,
        link_ps_per_block: 3_000_000,
    }
}

fn decode_configs() -> Vec<(&'static str, EngineConfig)> {
    let base = EngineConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 64,
        watermark_while_running: true,
        ..EngineConfig::for_tests(60, 4)
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
                ..base
            },
        ),
    ]
}

#[test]
fn prefilling_every_request_locally_is_the_aggregated_fleet() {
    let cancel = AtomicBool::new(false);
    for (name, cfg) in decode_configs() {
        for (kind, w) in [
            ("plain", workload(150, 21, 0, false)),
            ("quoting", workload(150, 22, 0, true)),
        ] {
            for router in ["least-loaded", "prefix-affinity", "round-robin"] {
                let spec = RouterSpec::named(router).unwrap();
                let cfgs = vec![cfg.clone(); 3];
                let agg = run_cluster(w.view(), &cfgs, &spec, &cancel).unwrap();
                let out = run_pd(w.view(), &cfgs, None, &spec, &pd(u64::MAX), &cancel).unwrap();
                let what = format!("{name}/{kind}/{router}");
                assert_same_rows(&out.cluster.out, &agg.out, &what);
                assert_eq!(out.cluster.replica, agg.replica, "{what}");
                assert_eq!(out.cluster.counters[..3], agg.counters[..], "{what}");
                assert!(out.cluster.counters[3..].iter().all(|c| c.num_steps == 0));
                assert!(out.prefill_replica.iter().all(|&p| p == -1), "{what}");
            }
        }
    }
}

#[test]
fn a_disaggregated_request_gets_its_first_token_on_a_prefill_replica_first() {
    let cancel = AtomicBool::new(false);
    for (name, cfg) in decode_configs() {
        let w = workload(150, 23, 0, true);
        let spec = RouterSpec::named("least-loaded").unwrap();
        let cfgs = vec![cfg.clone(); 2];
        let spec_pd = pd(0);
        let out = run_pd(w.view(), &cfgs, None, &spec, &spec_pd, &cancel).unwrap();
        let o = &out.cluster.out;
        let mut finished = 0;
        for row in 0..w.arrival_ps.len() {
            if o.status[row] != 0 {
                continue;
            }
            finished += 1;
            let p = out.prefill_replica[row];
            assert!((0..2).contains(&p), "{name}: row {row} prefilled on {p}");
            let (start, f) = (out.prefill_first_scheduled[row], out.prefill_finish[row]);
            assert!(w.arrival_ps[row] <= start && start < f, "{name}: row {row}");
            // The decode replica computes at least the prompt's last token once the transfer landed.
            assert!(o.first_token[row] > f, "{name}: row {row}");
            assert_eq!(o.generated[row], w.target[row], "{name}: row {row}");
        }
        assert!(finished > 100, "{name}: {finished} finished");
        let decode = &out.cluster.counters[..2];
        let transfers: i128 = decode.iter().map(|c| c.pd_transfers).sum();
        let blocks: i128 = decode.iter().map(|c| c.pd_transfer_blocks).sum();
        let busy: i128 = decode.iter().map(|c| c.pd_link_busy_ps).sum();
        assert!(transfers > 100, "{name}: {transfers} transfers");
        assert_eq!(
            busy,
            transfers * i128::from(spec_pd.link_latency_ps)
                + blocks * i128::from(spec_pd.link_ps_per_block),
            "{name}"
        );
        // The prefill pool computed the prompts: both its replicas stepped.
        assert!(
            out.cluster.counters[2..]
                .iter()
                .all(|c| c.num_steps > 0 && c.prompt_tokens_admitted > 0),
            "{name}"
        );
    }
}

#[test]
fn what_a_disaggregated_fleet_does_not_model_is_refused() {
    let cancel = AtomicBool::new(false);
    let cfg = EngineConfig {
        watermark_while_running: true,
        ..EngineConfig::for_tests(60, 4)
    };
    let spec = RouterSpec::named("least-loaded").unwrap();
    let err = |w: &Cols, cfgs: &[EngineConfig], spec: &RouterSpec, p: &PdSpec| {
        run_pd(w.view(), cfgs, None, spec, p, &cancel)
            .unwrap_err()
            .to_string()
    };
    let forks = workload(20, 1, 2, false);
    assert!(err(&forks, std::slice::from_ref(&cfg), &spec, &pd(0)).contains("fork-cow"));
    let plain = workload(20, 1, 0, false);
    let stale = RouterSpec::new("least-loaded", 0, 1_000, 1.5, None).unwrap();
    assert!(err(&plain, std::slice::from_ref(&cfg), &stale, &pd(0)).contains("router_refresh_ps"));
    let v0 = EngineConfig {
        one_free_block: true,
        ..cfg.clone()
    };
    assert!(err(&plain, &[v0], &spec, &pd(0)).contains("append_check 'exact'"));
    let none = PdSpec {
        prefill_replicas: 0,
        ..pd(0)
    };
    assert!(err(&plain, std::slice::from_ref(&cfg), &spec, &none).contains("prefill_replicas 0"));
    let spec_of = |kind, window, checkpoint_blocks| crate::kv_groups::GroupSpec {
        kind,
        window,
        block_size: 4,
        cap: None,
        checkpoint_blocks,
    };
    let windows = crate::kv_groups::Groups::new(
        vec![
            spec_of(crate::kv_groups::GroupKind::SlidingWindow, 8, 0),
            spec_of(crate::kv_groups::GroupKind::Full, 0, 0),
        ],
        4,
        Some(0),
        true,
    )
    .unwrap();
    let swa = EngineConfig {
        groups: Some(windows),
        ..cfg
    };
    assert!(
        run_pd(plain.view(), &[swa], None, &spec, &pd(0), &cancel).is_ok(),
        "sliding windows beside full attention are modelled"
    );
}

/// A Mamba (state) group beside full attention, block 16, one 100-token request (output 5) behind one
/// prefill replica, linear time (1,000 ps a step + 10 ps a token), 100 ps a block on the link; by hand
/// from vLLM 0.33.0's rules (DESIGN.md §Prefill/decode disaggregation, "A Mamba (state) group"): the
/// prefill replica computes the prompt but its last token (`_truncate_request_for_prefill`), cut by
/// align mode at the last boundary before it, [0, 96) then [96, 99) sampling its one token (1,960 +
/// 1,030 ps); the decode replica loads those 99 tokens (`_get_remote_prefill_token_count`): the full
/// group's 7 blocks, its partial last one included, and the state group's one slot
/// (`clip_ssm_state_blocks`), 800 ps; then it computes token 100 from the loaded state (1,010 ps) and
/// samples its first token at 4,800 ps, then decodes four more.
#[test]
fn a_state_group_s_prefill_stops_one_token_short_and_the_decode_side_computes_the_last() {
    let cancel = AtomicBool::new(false);
    let spec_of = |kind| crate::kv_groups::GroupSpec {
        kind,
        window: 0,
        block_size: 16,
        cap: (kind == crate::kv_groups::GroupKind::Mamba).then_some(2),
        checkpoint_blocks: 0,
    };
    let groups = crate::kv_groups::Groups::new(
        vec![
            spec_of(crate::kv_groups::GroupKind::Mamba),
            spec_of(crate::kv_groups::GroupKind::Full),
        ],
        16,
        Some(0),
        true,
    )
    .unwrap();
    let cfg = EngineConfig {
        watermark_while_running: true,
        max_num_batched_tokens: 512,
        groups: Some(groups),
        time: TimeModel::Linear {
            c0_ps: 1_000,
            c_tok_ps: 10,
            c_ctx_ps: 0,
        },
        ..EngineConfig::for_tests(200, 16)
    };
    cfg.validate().unwrap();
    let w = Cols {
        arrival_ps: vec![0],
        prompt_len: vec![100],
        target: vec![5],
        max_gen: vec![5],
        fork_parent: vec![-1],
        output_seg: vec![1 << 63],
        seg_offsets: vec![0, 1],
        segment_id: vec![5],
        segment_len: vec![100],
    };
    let spec = RouterSpec::named("round-robin").unwrap();
    let link = PdSpec {
        prefill_replicas: 1,
        threshold_tokens: 0,
        link_latency_ps: 0,
        link_ps_per_block: 100,
    };
    let out = run_pd(
        w.view(),
        std::slice::from_ref(&cfg),
        None,
        &spec,
        &link,
        &cancel,
    )
    .unwrap();
    let (d, p) = (&out.cluster.counters[0], &out.cluster.counters[1]);
    assert_eq!(
        (p.num_steps, p.sum_batched_tokens, p.prompt_tokens_admitted),
        (2, 99, 99)
    );
    assert_eq!(out.prefill_finish, [2_990]);
    assert_eq!((d.pd_transfers, d.pd_transfer_blocks), (1, 7 + 1));
    assert_eq!(d.pd_link_busy_ps, 800);
    assert_eq!(out.cluster.out.load_wait_ps, [800]);
    // The last prompt token, then four decode tokens, on the decode replica.
    assert_eq!(d.sum_batched_tokens, 1 + 4);
    assert_eq!(out.cluster.out.first_token, [2_990 + 800 + 1_010]);
    assert_eq!(out.cluster.out.status, [0]);
    // A prefill pool of another block size: vLLM refuses it for states with prefix caching.
    let other = EngineConfig {
        block_size: 32,
        ..cfg.clone()
    };
    let err = run_pd(
        w.view(),
        std::slice::from_ref(&cfg),
        Some(&other),
        &RouterSpec::named("round-robin").unwrap(),
        &pd(0),
        &cancel,
    )
    .unwrap_err();
    assert!(err.to_string().contains("block size 32 differs"), "{err}");
}

/// A decode replica's transfer that would end past the clock's range stops the fleet with its error:
/// a link time a block of any `u64` is refused as such (it once saturated into an end of -1 ps, seen
/// at once), and one ending exactly at the bound is not refused.
#[test]
fn a_transfer_past_the_clock_stops_the_fleet() {
    const TICK: i64 = 1_000_000_000;
    let cancel = AtomicBool::new(false);
    let cfg = EngineConfig {
        watermark_while_running: true,
        ..EngineConfig::for_tests(60, 16)
    };
    let late = crate::engine::MAX_TIME_PS as i64 - (1 << 39);
    // One request of 17 tokens (one full block), prefilled in one step from its arrival, then moved.
    let w = Cols {
        arrival_ps: vec![late],
        prompt_len: vec![17],
        target: vec![2],
        max_gen: vec![2],
        fork_parent: vec![-1],
        output_seg: vec![1 << 63],
        seg_offsets: vec![0, 1],
        segment_id: vec![5],
        segment_len: vec![17],
    };
    let spec = RouterSpec::named("round-robin").unwrap();
    let link = |latency, per_block| PdSpec {
        prefill_replicas: 1,
        threshold_tokens: 0,
        link_latency_ps: latency,
        link_ps_per_block: per_block,
    };
    let start = late + TICK;
    let want = format!(
        "a prefill-to-decode KV transfer of 1 blocks starting at {start} ps would end past"
    );
    for (latency, per_block) in [(0, u64::MAX), (u64::MAX, 0), (1 << 40, 1 << 40)] {
        let err = run_pd(
            w.view(),
            std::slice::from_ref(&cfg),
            None,
            &spec,
            &link(latency, per_block),
            &cancel,
        )
        .unwrap_err();
        assert!(err.to_string().contains(&want), "{err}");
    }
    // Ending at the bound less the decode replica's two steps: the run completes.
    let bound = crate::engine::MAX_TIME_PS - start as u64 - 2 * TICK as u64;
    let out = run_pd(
        w.view(),
        std::slice::from_ref(&cfg),
        None,
        &spec,
        &link(bound, 0),
        &cancel,
    )
    .unwrap();
    assert_eq!(out.cluster.out.status, [0]);
    assert_eq!(out.cluster.out.finish, [crate::engine::MAX_TIME_PS as i64]);
}
