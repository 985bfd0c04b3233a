//! The engine's unit tests (beside `mod.rs`, whose private items they read).

use super::*;

#[test]
fn private_content_starts_at_the_first_segment_no_other_prompt_contains() {
    // Rows: [7, 8] | [7, 9, 9] | [10, 7] | [11]; segment 9 repeats inside one prompt only.
    let ids = [7, 8, 7, 9, 9, 10, 7, 11];
    let lens = [4, 3, 4, 2, 2, 5, 4, 6];
    let offsets = [0, 2, 5, 7, 8];
    let prompt = [7, 8, 9, 6];
    let zeros = [0i64; 4];
    let inp = EngineInput {
        arrival_ps: &zeros,
        prompt_len: &prompt,
        target: &[1; 4],
        max_gen: &[1; 4],
        fork_parent: &[-1; 4],
        output_seg: &[1 << 63; 4],
        seg_offsets: &offsets,
        segment_id: &ids,
        segment_len: &lens,
    };
    inp.validate().unwrap();
    assert_eq!(private_starts(&inp), [4, 4, 0, 0]);
}

proptest::proptest! {
    /// Spread over buckets or sorted in one piece, the repeated ids are those a plain sort finds.
    #[test]
    fn repeated_ids_are_those_a_sort_finds(
        ids in proptest::collection::vec(proptest::prop_oneof![0u64..50, proptest::num::u64::ANY], 0..400),
        in_cache in 1usize..80,
    ) {
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let mut want: Vec<u64> = sorted.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
        want.dedup();
        proptest::prop_assert_eq!(seq::repeated_ids_by(&ids, in_cache), want.clone());
        proptest::prop_assert_eq!(seq::repeated_ids(&ids), want);
    }
}

/// tests/test_engine_golden.py's group scenario, derived there: B (prompt 8, output 6), then A (prompt
/// 8, output 3) with one forked sample, 7 blocks of 4, caching off. The group {A, A1} cannot grow
/// beside B in step 1 and is its own victim: swapped whole under `Auto` (its 2 shared blocks once),
/// back after B finishes (t = 6 ms), done at t = 8 ms; with a 1-block CPU pool its samples are
/// recomputed one by one instead.
/// Chunked prefill off, budget 32, ticks of 1 ms, prompts A 20, B 30, C 10, D 25 (outputs 3, 2, 2, 2)
/// all waiting at 0. Stopping at the first prompt over the budget left (vLLM ≥ 0.12) admits them in
/// order, one a step: A at 0 (12 left, B's 30 waits), B at 1 (A's token leaves 31), C at 2, D at 3.
/// Skipping (vLLM 0.9.2 to 0.11.2): step 0 admits A and C (20 + 10), skips B and D and puts them
/// back reversed, D first; step 1 (A and C decode, 30 left) admits D (25) and skips B (30 > 5);
/// step 2 (A and D decode) admits B with exactly 30.
#[test]
fn a_prompt_over_the_budget_left_stops_or_is_skipped() {
    const MS: i64 = 1_000_000_000;
    let prompt = [20i64, 30, 10, 25];
    let inp = EngineInput {
        arrival_ps: &[0; 4],
        prompt_len: &prompt,
        target: &[3, 2, 2, 2],
        max_gen: &[3, 2, 2, 2],
        fork_parent: &[-1; 4],
        output_seg: &[1 << 63, (1 << 63) + 1, (1 << 63) + 2, (1 << 63) + 3],
        seg_offsets: &[0, 1, 2, 3, 4],
        segment_id: &[1, 2, 3, 4],
        segment_len: &prompt,
    };
    let cfg = |skip_over_budget| EngineConfig {
        enable_prefix_caching: false,
        chunked_prefill: false,
        max_num_batched_tokens: 32,
        skip_over_budget,
        ..EngineConfig::for_tests(64, 16)
    };
    let stop = run(inp, &cfg(false), 0, false, &AtomicBool::new(false)).unwrap();
    assert_eq!(stop.first_scheduled, [0, MS, 2 * MS, 3 * MS]);
    assert_eq!(stop.finish, [3 * MS, 3 * MS, 4 * MS, 5 * MS]);
    let skip = run(inp, &cfg(true), 0, false, &AtomicBool::new(false)).unwrap();
    assert_eq!(skip.first_scheduled, [0, 2 * MS, 0, MS]);
    assert_eq!(skip.first_token, [MS, 3 * MS, MS, 2 * MS]);
    assert_eq!(skip.finish, [3 * MS, 4 * MS, 2 * MS, 3 * MS]);
    assert_eq!(skip.counters.num_steps, 4);
}

/// tests/test_async_scheduling.py's seat case, derived there from vLLM's loop: max_num_seqs 2, all at
/// 0, C (prompt 4, 10 tokens), A (4, 2 tokens of max 2), B (4, 1). Synchronous, A frees its seat at 2
/// and B runs at 2; asynchronous, step 2 is scheduled at 1 with A's last token in flight (A passed
/// over, holding its seat), so B runs at 3.
#[test]
fn async_scheduling_frees_a_finished_seat_a_step_later() {
    const MS: i64 = 1_000_000_000;
    let four = [4i64; 3];
    let inp = EngineInput {
        arrival_ps: &[0; 3],
        prompt_len: &four,
        target: &[10, 2, 1],
        max_gen: &[10, 2, 1],
        fork_parent: &[-1; 3],
        output_seg: &[1 << 63, (1 << 63) + 1, (1 << 63) + 2],
        seg_offsets: &[0, 1, 2, 3],
        segment_id: &[1, 2, 3],
        segment_len: &four,
    };
    let cfg = |async_scheduling| EngineConfig {
        max_num_seqs: 2,
        async_scheduling,
        ..EngineConfig::for_tests(40, 4)
    };
    let sync = run(inp, &cfg(false), 0, false, &AtomicBool::new(false)).unwrap();
    assert_eq!(sync.first_scheduled, [0, 0, 2 * MS]);
    let asyn = run(inp, &cfg(true), 0, false, &AtomicBool::new(false)).unwrap();
    assert_eq!(asyn.first_scheduled, [0, 0, 3 * MS]);
    assert_eq!(asyn.finish, [10 * MS, 2 * MS, 4 * MS]);
    assert_eq!(asyn.counters.sum_batched_tokens, 4 + 9 + 4 + 1 + 4);
}

#[test]
fn a_group_is_preempted_and_swapped_whole() {
    const MS: i64 = 1_000_000_000;
    let eight = [8i64; 3];
    let inp = EngineInput {
        arrival_ps: &[0; 3],
        prompt_len: &eight,
        target: &[6, 3, 3],
        max_gen: &[6, 3, 3],
        fork_parent: &[-1, -1, 1],
        output_seg: &[1 << 63, (1 << 63) + 1, (1 << 63) + 2],
        seg_offsets: &[0, 1, 2, 3],
        segment_id: &[1, 2, 2],
        segment_len: &eight,
    };
    let cfg = |cpu_blocks| EngineConfig {
        enable_prefix_caching: false,
        max_num_seqs: 16,
        preemption: Preemption::Auto,
        cpu_blocks,
        ..EngineConfig::for_tests(7, 4)
    };
    let swapped = run(inp, &cfg(4), 0, false, &AtomicBool::new(false)).unwrap();
    assert_eq!(swapped.finish, [6 * MS, 8 * MS, 8 * MS]);
    assert_eq!(swapped.num_swaps, [0, 1, 1]);
    assert_eq!(swapped.counters.num_swapped_blocks, 4);
    assert_eq!(swapped.counters.num_steps, 8);
    let split = run(inp, &cfg(1), 0, false, &AtomicBool::new(false)).unwrap();
    assert_eq!(split.num_swaps, [0, 0, 0]);
    assert_eq!(split.num_preemptions, [0, 1, 2]);
    assert_eq!(split.counters.recomputed_tokens, 8 + 8 + 9);
    assert_eq!(split.finish, [6 * MS, 4 * MS, 7 * MS]);
}

/// A transfer's end is checked arithmetic: exactly `MAX_TIME_PS` is fine, one past it is not, and
/// neither is a product or sum that would wrap `u64` or pass `i64` (the knobs' ranges keep the
/// Python API below them, `Engine`'s callers in Rust need not be).
#[test]
fn a_transfer_ends_within_the_clock_or_not_at_all() {
    use timing::transfer_end;
    let max = MAX_TIME_PS as i64;
    assert_eq!(transfer_end(max - 10, 2, 4, 2), Some(max));
    assert_eq!(transfer_end(max - 10, 3, 4, 2), None);
    // 2^20 blocks of 2^40 ps is 2^60 ps: within the range.
    assert_eq!(
        transfer_end(0, 0, 1 << 20, 1 << 40).map(|e| e as u64),
        Some(1 << 60)
    );
    assert_eq!(transfer_end(0, 0, 1 << 24, 1 << 40), None); // the product is 2^64: wraps u64
    assert_eq!(transfer_end(0, u64::MAX, 0, 0), None); // past i64
    assert_eq!(transfer_end(0, 1, 1, u64::MAX), None); // the sum wraps u64
    assert_eq!(transfer_end(i64::MAX, 0, 0, 0), None);
}

/// A one-row input of a 64-token prompt (one segment) arriving at `arrival`.
fn late_row(arrival: &[i64; 1]) -> EngineInput<'_> {
    EngineInput {
        arrival_ps: arrival,
        prompt_len: &[64],
        target: &[1],
        max_gen: &[1],
        fork_parent: &[-1],
        output_seg: &[1 << 63],
        seg_offsets: &[0, 1],
        segment_id: &[1],
        segment_len: &[64],
    }
}

/// A CPU tier's store that would end past the clock's range stops the run with its error (not a
/// finished run with a store in flight past it): at the bound the run finishes; the largest link
/// times (any `u64`) are refused as such, never wrapped into an early end.
#[test]
fn a_store_past_the_clock_stops_the_run() {
    const TICK: u64 = 1_000_000_000;
    let arrival = [MAX_TIME_PS as i64 - (1 << 39)];
    let inp = late_row(&arrival);
    let cfg = |latency_ps, ps_per_block| EngineConfig {
        tier: Some(TierConfig {
            chunks: 16,
            eviction: crate::cpu_tier::Eviction::Lru,
            prompt_only: true,
            blocks_per_chunk: 1,
            store_threshold: 0,
            store_count_per_request: false,
            hit_junction: false,
            ps_per_block,
            latency_ps,
            group_link: Vec::new(),
        }),
        watermark_while_running: true,
        ..EngineConfig::for_tests(64, 16)
    };
    // The prompt's 4 blocks are stored from the end of its step, at arrival + TICK.
    let begin = arrival[0] as u64 + TICK;
    let bound = MAX_TIME_PS - begin - 4 * 7;
    let cancel = AtomicBool::new(false);
    let out = run(inp, &cfg(bound, 7), 0, false, &cancel).unwrap();
    assert_eq!(out.counters.num_stores, 1);
    assert_eq!(out.finish, [arrival[0] + TICK as i64]);
    let err = run(inp, &cfg(bound + 1, 7), 0, false, &cancel).unwrap_err();
    assert!(matches!(err, KvError::InvalidArgument(_)), "{err}");
    let want = format!("a CPU-tier store of 4 blocks starting at {begin} ps would end past");
    assert!(err.to_string().contains(&want), "{err}");
    for (latency, per_block) in [(u64::MAX, 0), (0, u64::MAX), (1 << 63, 1 << 62)] {
        let err = run(inp, &cfg(latency, per_block), 0, false, &cancel).unwrap_err();
        assert!(err.to_string().contains(&want), "{err}");
    }
}

#[test]
fn forked_samples_must_follow_their_parent() {
    let ones = [1i64; 4];
    let input = |fork_parent: &'static [i64]| EngineInput {
        arrival_ps: &[0; 4],
        prompt_len: &[1; 4],
        target: &[1; 4],
        max_gen: &[1; 4],
        fork_parent,
        output_seg: &[1 << 63; 4],
        seg_offsets: &[0, 1, 2, 3, 4],
        segment_id: &[1, 2, 3, 4],
        segment_len: &ones,
    };
    input(&[-1, 0, 0, -1]).validate().unwrap();
    let err = input(&[-1, -1, 0, -1]).validate().unwrap_err();
    assert!(err.to_string().contains("row 2: fork_parent 0"), "{err}");
    let err = input(&[-1, 0, 1, -1]).validate().unwrap_err();
    assert!(err.to_string().contains("row 2: fork_parent 1"), "{err}");
}

/// A run into an output its caller made (`run_into`, the binding's: made in Python's thread) gives what
/// `run` gives, the ITL record's columns with room for their first runs; an output of other rows than
/// the input's is refused.
#[test]
fn a_run_into_the_callers_output_is_the_run() {
    let prompt = [20i64, 30, 10, 25];
    let inp = EngineInput {
        arrival_ps: &[0, 0, 1, 5],
        prompt_len: &prompt,
        target: &[3, 2, 2, 2],
        max_gen: &[3, 2, 2, 2],
        fork_parent: &[-1; 4],
        output_seg: &[1 << 63, (1 << 63) + 1, (1 << 63) + 2, (1 << 63) + 3],
        seg_offsets: &[0, 1, 2, 3, 4],
        segment_id: &[1, 2, 3, 4],
        segment_len: &prompt,
    };
    let cfg = EngineConfig::for_tests(64, 16);
    let cancel = AtomicBool::new(false);
    let out = EngineOutput::for_run(4);
    assert!(
        out.itl_runs
            .iter()
            .all(|c| c.is_empty() && c.capacity() >= output::ITL_FIRST_RUNS)
    );
    let into = run_into(inp, &cfg, 1, true, &cancel, Some(out)).unwrap();
    let plain = run(inp, &cfg, 1, true, &cancel).unwrap();
    assert_eq!(format!("{into:?}"), format!("{plain:?}"));
    assert_eq!(into.itl_runs[0].len(), 4);
    let err = run_into(inp, &cfg, 0, false, &cancel, Some(EngineOutput::for_run(3))).unwrap_err();
    assert!(matches!(err, KvError::InvalidArgument(m) if m.contains("3 rows for 4 input rows")));
}
