//! The engine's configuration: plain enums and integers (the Python `SimConfig` validates and converts).

use crate::kv_groups::Groups;
use crate::{FreeOrder, Result, invalid_arg};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// vLLM v1: paged, grows on demand, preempts the tail of running when a block is missing.
    Vllm,
    /// Paged, but admits only when blocks for prompt + max tokens can be promised; never preempts.
    Reserve,
    /// Contiguous region of `max_model_len` tokens per request.
    Static,
    /// Contiguous region of prompt + max tokens (Orca, the paper's "Orca (Max)").
    OrcaMax,
    /// Contiguous region of prompt + the next power of two of the true output.
    OrcaPow2,
    /// Contiguous region of prompt + the true output.
    OrcaOracle,
}

impl Policy {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "vllm" => Policy::Vllm,
            "reserve" => Policy::Reserve,
            "static" => Policy::Static,
            "orca-max" => Policy::OrcaMax,
            "orca-pow2" => Policy::OrcaPow2,
            "orca-oracle" => Policy::OrcaOracle,
            _ => invalid_arg!(
                "policy '{s}' is not one of 'vllm', 'reserve', 'static', 'orca-max', 'orca-pow2', 'orca-oracle'"
            ),
        })
    }

    pub fn is_paged(self) -> bool {
        matches!(self, Policy::Vllm | Policy::Reserve)
    }
}

/// What happens to a preempted sequence (and, under fork-cow, to a preempted sequence group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preemption {
    /// Free its blocks; it starts over from token 0 (vLLM v1).
    Recompute,
    /// Move its blocks to the CPU pool when they fit there, else recompute.
    Swap,
    /// vLLM v0's default: recompute a lone sequence, swap a group of several running samples.
    Auto,
}

impl Preemption {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "recompute" => Preemption::Recompute,
            "swap" => Preemption::Swap,
            "auto" => Preemption::Auto,
            _ => invalid_arg!("preemption '{s}' is not one of 'recompute', 'swap', 'auto'"),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimeModel {
    /// Every iteration lasts the same number of picoseconds.
    Ticks { iteration_ps: u64 },
    /// `c0 + c_tok · batched_tokens + c_ctx · context_tokens` picoseconds per iteration.
    Linear {
        c0_ps: u64,
        c_tok_ps: u64,
        c_ctx_ps: u64,
    },
    /// Per operator group the larger of its memory and compute time (DESIGN.md §Time model).
    Roofline(Box<Roofline>),
}

/// The largest roofline coefficient (2^40 ps, about 1.1 s; `kvsim.model.knobs.MAX_COEFFICIENT_PS`): with
/// it the roofline's sums fit 128 bits (`Roofline::base`).
pub const MAX_COEFFICIENT_PS: u64 = 1 << 40;

/// Attention classes of the roofline: the keys each query attends to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnKind {
    /// Every key before it.
    Full,
    /// The last `window` keys, itself included.
    Sliding,
    /// The keys of its own chunk of `window` tokens, up to itself.
    Chunked,
}

impl AttnKind {
    pub fn from_code(code: i64) -> Result<Self> {
        Ok(match code {
            0 => AttnKind::Full,
            1 => AttnKind::Sliding,
            2 => AttnKind::Chunked,
            _ => invalid_arg!(
                "attention class kind {code} is not 0 (full), 1 (sliding window) or 2 (chunked local)"
            ),
        })
    }
}

/// One attention class: picoseconds per key read and per query-key pair, its layers summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnClass {
    pub kind: AttnKind,
    pub window: u64,
    pub kv_ps: u64,
    pub flop_ps: u64,
    /// Per key a decoding sequence reads in a step that also prefills (the prefill kernel's path).
    pub mixed_kv_ps: u64,
    /// Per query-key pair of a sequence computing more than one token (a dense MLA layer's prefill
    /// path, `forward_mha`; `flop_ps` elsewhere).
    pub prefill_flop_ps: u64,
    /// Per key of such a sequence cached before the step (its keys read less its tokens in the step):
    /// a dense MLA layer's gather and key concatenation of the cached latents, each step (0 elsewhere).
    pub context_ps: u64,
    /// Per key read by a sequence computing more than one token (a dense MLA layer's `forward_mha`
    /// reads its keys and values up-projected; `kv_ps` elsewhere).
    pub prefill_kv_ps: u64,
    /// Per cached key, the up-projection GEMM's (`kv_b_proj`) activations and FLOPs, and its weights
    /// once a step with cached keys (dense MLA; 0 elsewhere).
    pub context_gemm_ps: u64,
    pub context_flop_ps: u64,
    pub context_weight_ps: u64,
}

impl AttnClass {
    /// Keys read and query-key pairs of a sequence with `c` tokens computed after a step that computed
    /// `n` of them (queries at positions c − n .. c − 1; `keys_and_pairs` of the reference).
    #[inline]
    pub fn keys_and_pairs(&self, c: u64, n: u64) -> (u128, u128) {
        let (c, n) = (u128::from(c), u128::from(n));
        let w = u128::from(self.window);
        match self.kind {
            AttnKind::Full => (c, n * c - n * (n - 1) / 2),
            AttnKind::Sliding => {
                let (lo, hi) = (c - n + 1, c);
                let pairs = if hi <= w {
                    (lo + hi) * n / 2
                } else if lo >= w {
                    w * n
                } else {
                    (lo + w) * (w - lo + 1) / 2 + (hi - w) * w
                };
                (c.min(w + n - 1), pairs)
            }
            AttnKind::Chunked => {
                let upto = |m: u128| (m / w) * (w * (w + 1) / 2) + (m % w) * (m % w + 1) / 2;
                (c - (c - n) / w * w, upto(c) - upto(c - n))
            }
        }
    }

    /// Per key read by a decoding sequence in a step of decodes only (its keys and pairs are equal).
    #[inline]
    pub fn decode_ps(&self) -> u64 {
        self.kv_ps.max(self.flop_ps)
    }

    /// The same in a step where some sequence prefills.
    #[inline]
    pub fn mixed_decode_ps(&self) -> u64 {
        self.mixed_kv_ps.max(self.flop_ps)
    }
}

/// The roofline's integer coefficients (`kvsim.model.timing.RooflineTimeModel`): a step of `T` tokens
/// over `S` sequences lasts `fixed + seq·S + tok·T + max(dense_mem + dense_mem_tok·T, dense_flop·T) +
/// max(moe_mem[min(N, len − 1)], moe_flop·N) + max(head_mem, head_flop·S) + Σ_class max(kv', flop)·Xd +
/// max(prefill_kv·Xp, prefill_flop·Yp) + context·C + max(context_weight + context_gemm·C, context_flop·C)`
/// picoseconds (`Xd` the keys read by sequences computing one token, `Xp`, `Yp` the keys and pairs of the
/// others, `C` = `Xp − Tp` the keys they had cached, `Tp` their tokens in the step, the context terms
/// only where `C > 0`; `kv'` is `kv`, or `mixed_kv` when some sequence prefills; `N` the tokens the routed
/// experts compute, every DP rank's: a group's driver sums its ranks', a lone engine takes
/// `moe_senders · T`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roofline {
    pub fixed_ps: u64,
    pub seq_ps: u64,
    pub tok_ps: u64,
    pub dense_mem_ps: u64,
    pub dense_mem_tok_ps: u64,
    pub dense_flop_tok_ps: u64,
    /// Picoseconds of the routed experts `N` tokens gathered touch, by `N` (empty: no experts).
    pub moe_mem_ps: Vec<u64>,
    /// Picoseconds per token the routed experts compute (every DP rank's, gathered).
    pub moe_flop_tok_ps: u64,
    pub head_mem_ps: u64,
    pub head_flop_seq_ps: u64,
    pub attention: Vec<AttnClass>,
    /// The DP ranks whose tokens a lone engine's experts compute, the others' batches taken as large as
    /// its own (1 without DP ranks; at least 1, at most `MAX_MOE_SENDERS`).
    pub moe_senders: u64,
}

/// The most DP ranks a lone engine's experts are taken to gather (`Roofline::moe_senders`).
pub const MAX_MOE_SENDERS: u64 = 1 << 16;

impl Roofline {
    /// Everything but attention, exactly, for a lone engine (its experts compute `moe_senders · tokens`):
    /// every coefficient is at most `MAX_COEFFICIENT_PS` (2^40, `validate`), so each product is below
    /// 2^120 and their sum fits 128 bits.
    #[inline]
    pub fn base(&self, tokens: u64, seqs: u64) -> u128 {
        let total = self.base_apart(tokens, seqs);
        if self.moe_mem_ps.is_empty() {
            return total; // (no experts: no product to form)
        }
        total + self.experts_ps(u128::from(tokens) * u128::from(self.moe_senders))
    }

    /// Everything but attention and the routed experts (a rank of a DP group: its driver adds the
    /// experts' term for the ranks' tokens gathered).
    #[inline]
    pub fn base_apart(&self, tokens: u64, seqs: u64) -> u128 {
        let (t, s) = (u128::from(tokens), u128::from(seqs));
        let w = u128::from;
        let dense = (w(self.dense_mem_ps) + w(self.dense_mem_tok_ps) * t)
            .max(w(self.dense_flop_tok_ps) * t);
        w(self.fixed_ps)
            + w(self.seq_ps) * s
            + w(self.tok_ps) * t
            + dense
            + w(self.head_mem_ps).max(w(self.head_flop_seq_ps) * s)
    }

    /// The routed experts' term for the `gathered` tokens they compute: `max(moe_mem[min(N, len − 1)],
    /// moe_flop·N)`, 0 without experts (`gathered` below 2^80: 2^40 tokens of 2^16 senders, or a group's
    /// ranks' sum).
    #[inline]
    pub fn experts_ps(&self, gathered: u128) -> u128 {
        let Some(&last) = self.moe_mem_ps.last() else {
            return 0;
        };
        let mem = usize::try_from(gathered)
            .ok()
            .and_then(|i| self.moe_mem_ps.get(i).copied())
            .unwrap_or(last);
        u128::from(mem).max(u128::from(self.moe_flop_tok_ps) * gathered)
    }

    /// A windowed class keeps the engine in full steps: a decoding sequence's keys stop growing at its
    /// window, so the step time is not affine across a quiet span.
    pub fn needs_full_steps(&self) -> bool {
        self.attention.iter().any(|a| a.kind != AttnKind::Full)
    }

    /// Per key read by a decoding sequence, over the (full-attention) classes.
    #[inline]
    pub fn decode_ps(&self) -> u128 {
        self.attention
            .iter()
            .map(|a| u128::from(a.decode_ps()))
            .sum()
    }

    pub fn validate(&self) -> Result<()> {
        let scalars = [
            ("fixed_ps", self.fixed_ps),
            ("seq_ps", self.seq_ps),
            ("tok_ps", self.tok_ps),
            ("dense_mem_ps", self.dense_mem_ps),
            ("dense_mem_tok_ps", self.dense_mem_tok_ps),
            ("dense_flop_tok_ps", self.dense_flop_tok_ps),
            ("moe_flop_tok_ps", self.moe_flop_tok_ps),
            ("head_mem_ps", self.head_mem_ps),
            ("head_flop_seq_ps", self.head_flop_seq_ps),
        ];
        let classes = self.attention.iter().flat_map(|a| {
            [
                ("kv_ps", a.kv_ps),
                ("flop_ps", a.flop_ps),
                ("mixed_kv_ps", a.mixed_kv_ps),
                ("prefill_flop_ps", a.prefill_flop_ps),
                ("context_ps", a.context_ps),
                ("prefill_kv_ps", a.prefill_kv_ps),
                ("context_gemm_ps", a.context_gemm_ps),
                ("context_flop_ps", a.context_flop_ps),
                ("context_weight_ps", a.context_weight_ps),
            ]
        });
        let table = self.moe_mem_ps.iter().map(|&v| ("moe_mem_ps", v));
        for (name, v) in scalars.into_iter().chain(classes).chain(table) {
            if v > MAX_COEFFICIENT_PS {
                invalid_arg!("roofline {name} {v} must be at most {MAX_COEFFICIENT_PS} ps");
            }
        }
        for a in &self.attention {
            if (a.kind == AttnKind::Full) != (a.window == 0) {
                invalid_arg!(
                    "attention class {:?} with window {}: sliding and chunked classes need a window, full none",
                    a.kind,
                    a.window
                );
            }
        }
        if !(1..=MAX_MOE_SENDERS).contains(&self.moe_senders) {
            invalid_arg!(
                "roofline moe_senders {} must be in [1, {MAX_MOE_SENDERS}]",
                self.moe_senders
            );
        }
        if self.moe_mem_ps.is_empty() && self.moe_flop_tok_ps != 0 {
            invalid_arg!(
                "roofline moe_flop_tok_ps {} without a moe_mem_ps table",
                self.moe_flop_tok_ps
            );
        }
        Ok(())
    }
}

/// Plain knobs, one per `SimConfig` field; several are independent on/off switches.
#[derive(Clone, Debug)]
#[allow(clippy::struct_excessive_bools)]
pub struct EngineConfig {
    pub num_blocks: u32,
    pub block_size: u64,
    pub policy: Policy,
    pub enable_prefix_caching: bool,
    pub free_order: FreeOrder,
    pub max_num_seqs: u64,
    pub max_num_batched_tokens: u64,
    pub chunked_prefill: bool,
    /// Admission needs blocks for the whole prompt, not just the first chunk (vLLM ≥ 0.20's gate).
    pub full_prompt_gate: bool,
    /// Chunked prefill off: a waiting sequence whose tokens exceed the budget left is skipped and later
    /// ones are tried, the skipped going back to the queue head in reverse order (vLLM 0.9.2 to 0.11.2,
    /// `SimConfig.waiting_over_budget = "skip"`); otherwise the waiting phase ends there (vLLM ≥ 0.12).
    pub skip_over_budget: bool,
    /// vLLM's asynchronous scheduling (DESIGN.md §Engine, "Asynchronous scheduling"): each step is
    /// scheduled when the step before it starts, with the arrivals up to then, and the requests that
    /// finish in a step keep their seats and blocks through the next step's schedule. vLLM v1's rules
    /// only (refused with a v0 rule or a CPU tier); the engine takes full steps.
    pub async_scheduling: bool,
    /// Blocks an admission (a waiting or preempted sequence's, or a swap-in) leaves free.
    pub watermark_blocks: u64,
    /// The watermark is held free only while some sequence is running, those admitted earlier in the
    /// same step included (vLLM v1 0.24.0 and later, `SimConfig.watermark_rule = "while-running"`);
    /// otherwise at every admission (vLLM v0, `"always"`).
    pub watermark_while_running: bool,
    /// vLLM v0's first block manager: a decoding sequence is scheduled only if a block is free, whether
    /// or not it needs one (`SimConfig.append_check = "one-free-block"`).
    pub one_free_block: bool,
    pub max_model_len: Option<u64>,
    pub time: TimeModel,
    /// Contiguous policies: buddy placement instead of first-fit.
    pub buddy: bool,
    /// Swap or recompute preempted sequences (swap falls back to recompute when the CPU pool is full).
    pub preemption: Preemption,
    pub cpu_blocks: u64,
    /// PCIe time per block swapped out or in, added to the step (both time models).
    pub swap_ps_per_block: u64,
    /// Several KV-cache groups (or one that is not full attention): vLLM's hybrid manager serves the
    /// pool (DESIGN.md §Hybrid attention). None: one full-attention group, the classic path.
    pub groups: Option<Groups>,
    /// vLLM's native KV offloading to a CPU tier (DESIGN.md §CPU tier); None: no tier.
    pub tier: Option<TierConfig>,
}

/// The CPU tier's knobs (`SimConfig.kv_offloading_*`).
#[derive(Clone, Debug, PartialEq)]
pub struct TierConfig {
    /// Chunks the tier holds (at least 1).
    pub chunks: u64,
    pub eviction: crate::cpu_tier::Eviction,
    /// Store prompt tokens only (vLLM's default).
    pub prompt_only: bool,
    /// GPU blocks per chunk.
    pub blocks_per_chunk: u64,
    /// Offers of a chunk before it is stored (under 2: every offer).
    pub store_threshold: u64,
    /// The threshold counts a key once per request (vLLM 0.34.0's `counted_keys`), not every offer
    /// (0.33.0): `SimConfig.kv_offloading_store_threshold_count` "per-request".
    pub store_count_per_request: bool,
    /// A hybrid model's tier hit cut short by a sparse group sets the request's junction at the
    /// full-attention groups' boundary (vLLM 0.34.0's `_maybe_register_shared_prefix_junction`):
    /// `SimConfig.kv_offloading_hit_junction`.
    pub hit_junction: bool,
    /// Time to move one block over the host link, each way.
    pub ps_per_block: u64,
    /// Fixed time of each transfer.
    pub latency_ps: u64,
    /// A hybrid model's groups, in their order (DESIGN.md §CPU tier, "A hybrid model"): what one of a
    /// group's blocks takes on the host link and moves, its own layers (vLLM 0.33.0's offloading worker
    /// copies a group's own layers, its padding layers none: `SimConfig.kv_offloading_group_ps_per_block`
    /// and `kv_offloading_group_block_bytes`); one per group with `EngineConfig::groups`, else empty
    /// (every block `ps_per_block`).
    pub group_link: Vec<GroupLink>,
}

/// One KV-cache group's block on the CPU tier's host link (`TierConfig::group_link`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupLink {
    /// Time to move one of its blocks, each way.
    pub ps_per_block: u64,
    /// Host bytes one of its blocks moves (every tensor-parallel rank's).
    pub bytes_per_block: u64,
}

/// The largest block the engines take, in tokens: the event ring holds a block's worth of steps (a
/// `block_size` of 2^31 asked for 100 GB and aborted); `SimConfig` takes at most 2^20, and a hybrid
/// model's block raised for its state layers is thousands of tokens.
pub const MAX_BLOCK_SIZE: u64 = 1 << 22;

impl EngineConfig {
    /// Unit tests' starting point: policy `vllm` with ticks of 1 ms, recompute, caching on, classic
    /// free order, no watermark, chunked prefill, 256 seats and a budget of 8192; tests change what
    /// they need with struct update syntax.
    #[cfg(test)]
    pub(crate) fn for_tests(num_blocks: u32, block_size: u64) -> Self {
        Self {
            num_blocks,
            block_size,
            policy: Policy::Vllm,
            enable_prefix_caching: true,
            free_order: FreeOrder::Classic,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            chunked_prefill: true,
            full_prompt_gate: false,
            skip_over_budget: false,
            async_scheduling: false,
            watermark_blocks: 0,
            watermark_while_running: false,
            one_free_block: false,
            max_model_len: None,
            time: TimeModel::Ticks {
                iteration_ps: 1_000_000_000,
            },
            buddy: false,
            preemption: Preemption::Recompute,
            cpu_blocks: 0,
            swap_ps_per_block: 0,
            groups: None,
            tier: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.async_scheduling
            && (self.policy != Policy::Vllm
                || self.preemption != Preemption::Recompute
                || self.one_free_block)
        {
            invalid_arg!(
                "async_scheduling takes vLLM v1's rules: policy 'vllm', preemption 'recompute', append_check 'exact'"
            );
        }
        if self.num_blocks < 2 {
            invalid_arg!("num_blocks {} must be at least 2", self.num_blocks);
        }
        if !(1..=MAX_BLOCK_SIZE).contains(&self.block_size) {
            invalid_arg!(
                "block_size {} must lie in [1, {MAX_BLOCK_SIZE}] (SimConfig takes at most 2^20; a hybrid \
                 model's raised block is thousands)",
                self.block_size
            );
        }
        if self.max_num_seqs < 1 {
            invalid_arg!("max_num_seqs {} must be at least 1", self.max_num_seqs);
        }
        if self.max_num_batched_tokens < 1 {
            invalid_arg!(
                "max_num_batched_tokens {} must be at least 1",
                self.max_num_batched_tokens
            );
        }
        if self.policy == Policy::Static && self.max_model_len.is_none() {
            invalid_arg!("policy 'static' reserves max_model_len per request: set max_model_len");
        }
        if self.one_free_block && self.policy != Policy::Vllm {
            invalid_arg!("append_check 'one-free-block' applies to policy 'vllm'");
        }
        if self.preemption != Preemption::Recompute && self.policy != Policy::Vllm {
            invalid_arg!(
                "preemption {:?} applies to policy 'vllm'",
                format!("{:?}", self.preemption).to_lowercase()
            );
        }
        if let Some(groups) = &self.groups {
            if groups.align() && !self.chunked_prefill {
                invalid_arg!(
                    "Mamba prefix caching (vLLM's mamba_cache_mode 'align') needs chunked prefill: vLLM asserts it on"
                );
            }
            if self.policy != Policy::Vllm {
                invalid_arg!("KV-cache groups (a hybrid model) apply to policy 'vllm' only");
            }
            if self.preemption != Preemption::Recompute || self.one_free_block {
                invalid_arg!(
                    "KV-cache groups (a hybrid model) take vLLM v1's rules: preemption 'recompute', append_check 'exact'"
                );
            }
        }
        if let Some(tier) = &self.tier {
            self.validate_tier(tier)?;
        }
        match &self.time {
            TimeModel::Ticks { iteration_ps: 0 } => {
                invalid_arg!("iteration_time_ps 0 must be at least 1");
            }
            TimeModel::Roofline(r) => r.validate()?,
            _ => {}
        }
        Ok(())
    }

    /// The CPU tier's checks (`validate`).
    fn validate_tier(&self, tier: &TierConfig) -> Result<()> {
        if tier.chunks < 1 || tier.blocks_per_chunk < 1 {
            invalid_arg!("the CPU tier needs at least 1 chunk of at least 1 block");
        }
        let groups = self.groups.as_ref().map_or(0, Groups::len);
        if tier.group_link.len() != groups {
            invalid_arg!(
                "the CPU tier's group_link has {} entries for {groups} KV-cache groups (one a group of a hybrid model, none otherwise)",
                tier.group_link.len()
            );
        }
        // (a chunk's tokens, blocks_per_chunk x block_size, are a u64 the engine divides by)
        if tier.blocks_per_chunk > MAX_BLOCK_SIZE {
            invalid_arg!(
                "the CPU tier's blocks_per_chunk {} must be at most {MAX_BLOCK_SIZE}",
                tier.blocks_per_chunk
            );
        }
        if self.policy != Policy::Vllm
            || !self.enable_prefix_caching
            || self.preemption != Preemption::Recompute
            || self.skip_over_budget
            || self.one_free_block
            || !self.watermark_while_running
        {
            invalid_arg!(
                "the CPU tier takes vLLM v1's rules: policy 'vllm', prefix caching on, preemption 'recompute', waiting_over_budget 'stop', append_check 'exact', watermark_rule 'while-running'"
            );
        }
        if let Some(groups) = &self.groups {
            // (DESIGN.md §CPU tier, "A hybrid model": groups whose block sizes are multiples of the
            // engine's, vLLM's default retention; Mamba groups only where every group has one block
            // size, "A Mamba group")
            let specs = groups.specs();
            if specs.iter().any(|g| g.block_size % self.block_size != 0)
                || !specs.iter().any(|g| g.block_size == self.block_size)
                || groups.retention() != Some(0)
            {
                invalid_arg!(
                    "the CPU tier of a hybrid model is modelled for groups whose block sizes are multiples of the engine's (one of them that size) with prefix_cache_retention_interval 0"
                );
            }
            if specs
                .iter()
                .any(|g| g.kind == crate::kv_groups::GroupKind::Mamba)
                && specs.iter().any(|g| g.block_size != self.block_size)
            {
                invalid_arg!(
                    "the CPU tier is not modelled for a Mamba (state) group beside groups of another block size"
                );
            }
        }
        Ok(())
    }

    #[inline]
    pub fn capacity_blocks(&self) -> u64 {
        u64::from(self.num_blocks) - 1
    }

    #[inline]
    pub fn capacity_tokens(&self) -> u64 {
        self.capacity_blocks() * self.block_size
    }
}
