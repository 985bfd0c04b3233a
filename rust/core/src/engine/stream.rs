//! A run fed in chunks (`kvsim.simulate_stream`): rows arrive chunk by chunk, in arrival order, and the
//! rows that are done (finished or rejected, every earlier row too) are taken out as they complete, so
//! memory holds the rows in flight rather than the whole workload.
//!
//! The engine is the same `Engine`, over a window of the input: `Engine::row_base` is the first row
//! its input view holds and `out_base` the first row its output columns hold. Between `advance` calls
//! the window is rebuilt: rows before `out_base` are dropped (a row that is done is never read again),
//! the new chunk is appended. `advance` steps only while no step can depend on rows not fed yet
//! (`Engine::advance`), so a chunked run takes exactly the steps of a whole one. What a whole run
//! learns from the whole input up front (deferred keys: no prompt quotes an output, and which prompt
//! content no other prompt holds) is taken conservatively, every full block hashed and registered as the
//! reference does, unless the caller promises *independent* chunks (no prompt shares content with, or
//! quotes an output of, another chunk's requests): then it is learnt chunk by chunk, the first chunk
//! deciding whether outputs are quoted at all (a later chunk that quotes one is refused). Groups are
//! expected if the caller says so.

use std::sync::atomic::AtomicBool;

use super::{
    Engine, EngineConfig, EngineInput, EngineOutput, Memory, OUTPUT_BIT, Policy, Result,
    private_starts,
};
use crate::{KvError, invalid_arg};

/// `old` then `new` in one vector.
fn joined<T: Copy>(old: &[T], new: &[T]) -> Vec<T> {
    let mut v = Vec::with_capacity(old.len() + new.len());
    v.extend_from_slice(old);
    v.extend_from_slice(new);
    v
}

/// The window's columns, owned (the engine's `EngineInput` view points into them).
#[derive(Default)]
pub(crate) struct Buffers {
    pub(crate) arrival_ps: Vec<i64>,
    pub(crate) prompt_len: Vec<i64>,
    pub(crate) target: Vec<i64>,
    pub(crate) max_gen: Vec<i64>,
    pub(crate) fork_parent: Vec<i64>,
    pub(crate) output_seg: Vec<u64>,
    pub(crate) seg_offsets: Vec<i64>,
    pub(crate) segment_id: Vec<u64>,
    pub(crate) segment_len: Vec<i64>,
}

impl Buffers {
    pub(crate) fn view(&self) -> EngineInput<'_> {
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
}

/// Extends a view of `Buffers` (or of the boxed config) to `'static`.
///
/// # Safety
/// The caller keeps the viewed heap buffers alive and unchanged for as long as the engine holds the
/// view: `StreamEngine` replaces the view before it drops or changes a buffer, and drops the engine
/// before the buffers and the config (field order).
pub(crate) unsafe fn forever<T: ?Sized>(r: &T) -> &'static T {
    unsafe { &*std::ptr::from_ref(r) }
}

pub struct StreamEngine {
    /// Borrows `buf` and `cfg` (see `forever`); declared first, so it is dropped first.
    engine: Engine<'static>,
    buf: Box<Buffers>,
    cfg: Box<EngineConfig>,
    last_arrival: i64,
    /// The run ended (final input taken) or failed: nothing more can be fed or advanced.
    ended: bool,
    /// The caller promised independent chunks (see the module's documentation).
    independent: bool,
    fed_any: bool,
}

impl StreamEngine {
    /// An empty run under `cfg`; `forks`: chunks may hold fork-cow samples (`fork_parent` rows);
    /// `independent`: no prompt shares content with, or quotes an output of, another chunk's requests.
    pub fn new(cfg: EngineConfig, forks: bool, independent: bool) -> Result<Self> {
        Self::new_cancellable(cfg, forks, independent, None)
    }

    /// `new` whose setup (the pool) reads `cancel` (Ctrl-C): see `Engine::new_cancellable`.
    pub fn new_cancellable(
        cfg: EngineConfig,
        forks: bool,
        independent: bool,
        cancel: Option<&AtomicBool>,
    ) -> Result<Self> {
        let cfg = Box::new(cfg);
        let buf = Box::new(Buffers {
            seg_offsets: vec![0],
            ..Buffers::default()
        });
        // SAFETY: `cfg` and `buf` are boxed and owned by the `StreamEngine` that owns the engine.
        let (cfg_ref, view) = unsafe { (forever(&*cfg), forever(&*buf).view()) };
        let mut engine = Engine::new_cancellable(view, cfg_ref, cancel)?;
        engine.final_input = false;
        engine.defer_keys = false;
        engine.private_from = Vec::new();
        engine.fill_events = cfg.policy.is_paged() && cfg.enable_prefix_caching;
        engine.forks = forks;
        Ok(StreamEngine {
            engine,
            buf,
            cfg,
            last_arrival: 0,
            ended: false,
            independent,
            fed_any: false,
        })
    }

    fn check_open(&self) -> Result<()> {
        if self.ended {
            return Err(KvError::InvalidOperation(
                "the stream has ended: start a new one".into(),
            ));
        }
        Ok(())
    }

    /// Appends `chunk` (its `fork_parent` rows count from the chunk's first row) to the input.
    pub fn feed(&mut self, chunk: EngineInput<'_>) -> Result<()> {
        self.check_open()?;
        chunk.validate()?;
        if chunk.has_forks() {
            if !self.engine.forks {
                invalid_arg!(
                    "a chunk holds fork-cow samples but the stream was started without forks"
                );
            }
            if self.cfg.policy != Policy::Vllm {
                invalid_arg!(
                    "sampling 'fork-cow' (rows with a fork_parent) applies to policy 'vllm'"
                );
            }
            if self.cfg.max_num_batched_tokens < self.cfg.max_num_seqs {
                invalid_arg!(
                    "sampling 'fork-cow' needs max_num_batched_tokens >= max_num_seqs (vLLM v0's rule), got max_num_batched_tokens {} < max_num_seqs {}",
                    self.cfg.max_num_batched_tokens,
                    self.cfg.max_num_seqs
                );
            }
        }
        if let Some(&first) = chunk.arrival_ps.first()
            && first < self.last_arrival
        {
            invalid_arg!(
                "a chunk starts at arrival {first} ps, before the previous chunk's last arrival {} ps: chunks must come in arrival order",
                self.last_arrival
            );
        }
        let quotes = chunk.segment_id.iter().any(|&id| id >= OUTPUT_BIT);
        if self.independent && !self.fed_any {
            // The first chunk decides: deferred keys unless outputs are quoted.
            // (a hybrid pool keys its own blocks, never deferred, as `Engine::new` decides)
            let e = &mut self.engine;
            e.defer_keys = !quotes && self.cfg.groups.is_none();
            e.fill_events =
                self.cfg.policy.is_paged() && self.cfg.enable_prefix_caching && !e.defer_keys;
        } else if self.engine.defer_keys && quotes {
            invalid_arg!(
                "a chunk quotes a generated output but the first chunk did not: with independent chunks the first one must show whether outputs are quoted (or stream without independent_chunks)"
            );
        }
        self.fed_any = true;
        let e = &self.engine;
        let keep = e.out_base - e.row_base; // rows before `out_base` are done: never read again
        let base = e.row_base + self.buf.arrival_ps.len(); // the chunk's first row
        let old = &self.buf;
        let n = chunk.len();
        let seg_lo = old.seg_offsets[keep] as usize;
        let mut seg_offsets = Vec::with_capacity(old.seg_offsets.len() - keep + n);
        seg_offsets.extend(old.seg_offsets[keep..].iter().map(|&o| o - seg_lo as i64));
        let shift = *seg_offsets.last().expect("offsets start at 0");
        seg_offsets.extend(chunk.seg_offsets[1..].iter().map(|&o| o + shift));
        let fork_parent = if self.engine.forks {
            let mut v = old.fork_parent[keep..].to_vec();
            v.extend((0..n).map(|i| match chunk.fork_parent(i) {
                p if p >= 0 => p + base as i64,
                _ => -1,
            }));
            v
        } else {
            Vec::new()
        };
        let new = Box::new(Buffers {
            arrival_ps: joined(&old.arrival_ps[keep..], chunk.arrival_ps),
            prompt_len: joined(&old.prompt_len[keep..], chunk.prompt_len),
            target: joined(&old.target[keep..], chunk.target),
            max_gen: joined(&old.max_gen[keep..], chunk.max_gen),
            fork_parent,
            output_seg: joined(&old.output_seg[keep..], chunk.output_seg),
            seg_offsets,
            segment_id: joined(&old.segment_id[seg_lo..], chunk.segment_id),
            segment_len: joined(&old.segment_len[seg_lo..], chunk.segment_len),
        });
        if self.engine.defer_keys && self.cfg.enable_prefix_caching && self.cfg.policy.is_paged() {
            // Independent chunks: what is private to a row is decided within its chunk.
            let mut private = self.engine.private_from.split_off(keep);
            private.extend(private_starts(&chunk));
            self.engine.private_from = private;
        }
        // SAFETY: `new` is owned by `self` from here on and replaced only through this function, after
        // the engine's view has moved to its successor.
        self.engine.inp = unsafe { forever(&*new).view() };
        self.engine.row_base = self.engine.out_base;
        self.buf = new;
        self.engine.out.extend_rows(n);
        if let Some(&last) = chunk.arrival_ps.last() {
            self.last_arrival = last;
        }
        Ok(())
    }

    /// Steps as far as the input fed allows (to the end with `final_input`); Ctrl-C sets `cancel`.
    pub fn advance(&mut self, final_input: bool, cancel: &AtomicBool) -> Result<()> {
        self.check_open()?;
        self.engine.final_input = final_input;
        // SAFETY: the reference is dropped again before this call returns.
        self.engine.cancel = Some(unsafe { forever(cancel) });
        let result = self.engine.advance();
        self.engine.cancel = None;
        if result.is_err() {
            self.ended = true; // a failed or cancelled run may be half-changed
        } else if final_input {
            self.engine.finish_counters();
            self.ended = true;
        }
        result
    }

    /// The output columns of the rows done so far (finished or rejected, every earlier row too), taken
    /// out of the engine; rows count on from the last call's.
    pub fn take_done(&mut self) -> EngineOutput {
        let out = &mut self.engine.out;
        let k = out.status.iter().take_while(|&&s| s >= 0).count();
        self.engine.out_base += k;
        out.take_front(k)
    }

    /// The run's counters (complete once the final input was advanced).
    pub fn counters(&self) -> super::Counters {
        self.engine.out.counters.clone()
    }

    /// Whether the engine's memory is paged (for tests).
    pub fn is_paged(&self) -> bool {
        matches!(self.engine.mem, Memory::Paged(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::run;

    /// Eight requests, fed one row at a time: the same columns and counters as a whole run, in pieces;
    /// sharing a prefix across chunks (so not independent), or private prompts (independent chunks).
    #[test]
    fn a_stream_fed_row_by_row_equals_the_whole_run() {
        let n = 8;
        let arrival: Vec<i64> = (0..n).map(|i| i * 1_500_000_000).collect();
        let prompt: Vec<i64> = (0..n).map(|i| 20 + 3 * i).collect();
        let target: Vec<i64> = (0..n).map(|i| 5 + (i * 7) % 11).collect();
        let output_seg: Vec<u64> = (0..n as u64).map(|i| (1 << 63) | (i << 16)).collect();
        let offsets: Vec<i64> = (0..=n).map(|i| 2 * i).collect();
        let lens: Vec<i64> = (0..n).flat_map(|i| [16, 4 + 3 * i]).collect();
        let cfg = EngineConfig {
            max_num_seqs: 3,
            ..EngineConfig::for_tests(12, 4)
        };
        let cancel = AtomicBool::new(false);
        for independent in [false, true] {
            // Shared: every prompt starts with content 7; private: each with its own.
            let ids: Vec<u64> = (0..n as u64)
                .flat_map(|i| [if independent { 300 + i } else { 7 }, 100 + i])
                .collect();
            let inp = EngineInput {
                arrival_ps: &arrival,
                prompt_len: &prompt,
                target: &target,
                max_gen: &target,
                fork_parent: &[],
                output_seg: &output_seg,
                seg_offsets: &offsets,
                segment_id: &ids,
                segment_len: &lens,
            };
            let whole = run(inp, &cfg, 0, false, &cancel).unwrap();
            let mut stream = StreamEngine::new(cfg.clone(), false, independent).unwrap();
            let mut finish = Vec::new();
            for i in 0..n as usize {
                let lo = offsets[i] as usize;
                let one = EngineInput {
                    arrival_ps: &arrival[i..=i],
                    prompt_len: &prompt[i..=i],
                    target: &target[i..=i],
                    max_gen: &target[i..=i],
                    fork_parent: &[],
                    output_seg: &output_seg[i..=i],
                    seg_offsets: &[0, 2],
                    segment_id: &ids[lo..lo + 2],
                    segment_len: &lens[lo..lo + 2],
                };
                stream.feed(one).unwrap();
                stream.advance(false, &cancel).unwrap();
                finish.extend(stream.take_done().finish);
            }
            stream.advance(true, &cancel).unwrap();
            finish.extend(stream.take_done().finish);
            assert_eq!(finish, whole.finish, "independent {independent}");
            assert_eq!(stream.counters(), whole.counters);
            assert!(stream.feed(inp).is_err(), "the stream has ended");
        }
    }
}
