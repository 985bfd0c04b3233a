// Guided experiments: what to toggle, what to look for, and a live check of the invariant on the state
// at the current step. The checks compare numbers the bundle gives (metrics, replayed rows) with each
// other; they derive nothing the engine did not report.

import { bytes, esc, int, secs, times } from "./format.js";
import { S } from "./replay.js";

/** Every held block's ref_cnt against the number of block tables holding it at this step. */
function refCountsMatchTables(r) {
  const t = r.paged;
  const held = new Int32Array(t.numBlocks);
  for (const e of t.live) for (const b of t.seqs.row(e)[S.table]) if (b >= 0 && b < t.numBlocks) held[b] += 1;
  let checked = 0;
  const bad = [];
  for (let b = 0; b < t.numBlocks; b += 1) {
    const blk = t.block(b);
    if (blk.state === "null") continue;
    if (blk.ref_cnt > 0 || held[b] > 0) checked += 1;
    if (blk.ref_cnt !== held[b]) bad.push(`P_${b}: ref ${blk.ref_cnt}, ${held[b]} tables`);
  }
  return { checked, bad };
}

/** Shared blocks, and the tokens sharing saves: Σ (ref_cnt − 1) × tokens held, over held blocks. */
function sharedSummary(r) {
  const t = r.paged;
  let savedTokens = 0;
  let shared = 0;
  let maxRef = 0;
  for (let b = 0; b < t.numBlocks; b += 1) {
    const blk = t.block(b);
    if (blk.ref_cnt > 1) {
      savedTokens += (blk.ref_cnt - 1) * blk.num_tokens;
      shared += 1;
      maxRef = Math.max(maxRef, blk.ref_cnt);
    }
  }
  return { savedTokens, shared, maxRef };
}

const ok = (pass, text) => ({ pass, text });

/** The block-size check on a hybrid model: every attention-group table of a sequence holding blocks has
 * ⌈tokens / B⌉ entries (null blocks included), its last block 1…B tokens, a state table one block (with
 * prefix caching, vLLM's align mode: ⌈tokens / B⌉ entries too, a state at block boundaries); and the slack
 * within its bound (B − 1 per attention group and sequence). */
function hybridTables(r) {
  const t = r.paged;
  const bad = [];
  const align = r.bundle.query.enable_prefix_caching === true;
  let n = 0;
  for (const e of t.live) {
    const row = t.seqs.row(e);
    const c = row[S.ctx] + row[S.ctxRate] * (r.step - row[S.step]);
    n += 1;
    r.groups.forEach((g, x) => {
      const len = row[S.tables][x].length;
      const want = g.kind === "mamba" && !align ? 1 : Math.ceil(c / g.block_size);
      if (len !== want) bad.push(`${r.name(row[S.rid], row[S.sample])} G${x}: ${len} entries for ${c} tokens`);
    });
  }
  if (n === 0) return notHere(`no sequence holds a block at step ${int(r.step)}: scrub to a step where one runs.`);
  const slack = r.metric("paged_tail_slack_bytes");
  const bound = r.metric("paged_tail_slack_bound_bytes");
  const boundOk = bound === null || slack === null ? null : slack <= bound;
  return ok(bad.length === 0 && boundOk !== false,
    `${int(n)} sequences hold blocks; ` + (bad.length ? `not ⌈tokens / B⌉ entries for ${esc(bad.slice(0, 3).join("; "))}`
      : `each attention-group table has ⌈tokens / B⌉ entries${
        r.groups.some((g) => g.kind === "sliding_window" || g.kind === "chunked_local") ? " (null blocks where a window left)" : ""}${
        r.groups.some((g) => g.kind === "mamba") ? (align ? " and each state table ⌈tokens / B⌉ entries, mostly null (prefix caching keeps a state per block boundary)" : " and each state table one block") : ""}`) +
    `. Tail slack ${bytes(slack)}` + (bound !== null ? ` ${boundOk ? "≤" : ">"} bound ${bytes(bound)}.` : "."));
}
// A check that does not apply to this preset or step: no verdict, and why (pass null).
const notHere = (why) => ({ pass: null, text: why });

/** Blocks shared by sequences of different requests (prefix caching), and by samples of one request
 * (forks), at this step. */
function sharing(r) {
  const t = r.paged;
  const holders = new Map(); // block -> request ids of the tables holding it (one pass over the tables)
  for (const e of t.live) {
    const row = t.seqs.row(e);
    for (const b of row[S.table]) {
      if (t.refOf(b) < 2) continue;
      if (!holders.has(b)) holders.set(b, []);
      holders.get(b).push(row[S.rid]);
    }
  }
  let across = 0;
  let within = 0;
  for (const rids of holders.values()) {
    const distinct = new Set(rids).size;
    if (distinct > 1) across += 1;
    if (distinct < rids.length) within += 1;
  }
  return { across, within };
}

export const EXPERIMENTS = [
  {
    id: "prefix",
    title: "Prefix caching: shared full blocks",
    setup: { preset: "copilot", enable_prefix_caching: true },
    setupText: "Load Copilot with prefix caching on",
    toggle: "Open the Copilot preset. Then switch Prefix caching off and on again.",
    look: "req-1, req-2 and req-3 share the blocks of the 32-token system prompt sys-coding-agent-v1: those " +
      "cells are striped with a ref-count badge of 3, and the inspector lists all three requests. Only full blocks " +
      "are shared, and none is ever copied (copy-on-write is the fork-cow samples’, see Parallel sampling). With caching " +
      "off every request holds its own copy: prefix savings fall to 0 and the pool allocates more.",
    verifies: "Verifies multi-tenant de-duplication",
    condition: "every held block’s ref_cnt equals the block tables holding it, and prefix saved = " +
      "Σ (ref_cnt − 1) × tokens held × bytes per token, while two requests share a block",
    check(r) {
      if (r.bundle.query.enable_prefix_caching === false) return notHere("prefix caching is off, so no request shares another’s blocks.");
      const { across } = sharing(r);
      if (across === 0) {
        return notHere(`no block is shared by two requests at step ${int(r.step)}` +
          " (here requests share no prompt, or not at this step: load Copilot, or scrub).");
      }
      const { checked, bad } = refCountsMatchTables(r);
      const { savedTokens, shared, maxRef } = sharedSummary(r);
      const saved = r.metric("prefix_saved_bytes");
      const expect = savedTokens * r.bundle.bytes_per_token;
      const savedOk = saved === null ? null : saved === expect;
      const pass = bad.length === 0 && savedOk !== false;
      return ok(pass, `${int(checked)} held blocks: ` + (bad.length ? `ref_cnt differs from the tables holding it at ${esc(bad.slice(0, 3).join("; "))}`
        : "every ref_cnt equals the tables holding it") +
        `. ${int(across)} block${across === 1 ? "" : "s"} shared across requests, ${int(shared)} shared in all (max ref ${maxRef}): Σ(ref − 1) × tokens held × bytes/token = ` +
        `${bytes(expect)} ${savedOk === false ? "≠" : "="} prefix saved ${bytes(saved)}.`);
    },
  },
  {
    id: "block-size",
    title: "Block size trade-off (16 vs 32)",
    setup: { block_size: 32 },
    setupText: "Switch to block size 32",
    toggle: "Switch Block size between 16 and 32 on the same preset and step.",
    look: "The KV cache keeps its memory, so at 32 it has half the blocks, each twice the bytes, and the block " +
      "tables halve in length; but every sequence’s last block has up to twice the slack: the Paged " +
      "fragmentation card rises, roughly B / 2 tokens per sequence on average.",
    verifies: "Verifies the bounded-slack invariant",
    condition: "each sequence holding blocks has ⌈tokens / B⌉ of them, so its last block holds 1…B tokens, " +
      "and the tail slack stays within the bound of B − 1 tokens per running sequence",
    check(r) {
      const t = r.paged;
      const bs = r.blockSize;
      let n = 0;
      const bad = [];
      if (r.groups) return hybridTables(r);
      for (const e of t.live) {
        const row = t.seqs.row(e);
        const c = row[S.ctx] + row[S.ctxRate] * (r.step - row[S.step]);
        const len = row[S.table].length;
        if (len === 0) continue;
        const tail = c - (len - 1) * bs; // tokens in the last block
        n += 1;
        if (!(tail >= 1 && tail <= bs)) bad.push(`${r.name(row[S.rid], row[S.sample])}: ${c} tokens in ${len} blocks`);
      }
      if (n === 0) return notHere(`no sequence holds a block at step ${int(r.step)}: scrub to a step where one runs.`);
      const slack = r.metric("paged_tail_slack_bytes");
      const bound = r.metric("paged_tail_slack_bound_bytes");
      const boundOk = bound === null || slack === null ? null : slack <= bound;
      return ok(bad.length === 0 && boundOk !== false,
        `${int(n)} sequences hold blocks; ` + (bad.length ? `not ⌈tokens / B⌉ blocks for ${esc(bad.slice(0, 3).join("; "))}`
          : `each has ⌈tokens / B⌉ blocks, so its last block holds 1…${bs} tokens (slack < B)`) +
        `. Tail slack ${bytes(slack)}` + (bound !== null ? ` ${boundOk ? "≤" : ">"} bound ${bytes(bound)}.` : "."));
    },
  },
  {
    id: "contiguous",
    title: "Contiguous waste vs paged concurrency",
    setup: { preset: "chat" },
    setupText: "Load the Chat preset",
    toggle: "Compare the two panels at several steps (scrub), and switch the Contiguous baseline between " +
      "orca-oracle, orca-pow2, orca-max and static.",
    look: "Contiguous reservation locks memory for tokens not generated yet: the exact output (orca-oracle), a " +
      "power of two of it (orca-pow2), what the client asked for (orca-max) or the whole context (static); " +
      "its holes show in the region map. Paged memory has no external fragmentation, so the same memory holds " +
      "more sequences: each panel’s batch, and the concurrency multiplier.",
    verifies: "Verifies the concurrency multiplier",
    condition: "multiplier = (contiguous reserved ÷ its running sequences) ÷ (paged allocated ÷ its running " +
      "sequences, and those held for a CPU-tier load), contiguous used ≤ reserved, and paged external fragmentation 0, while both sides run",
    check(r) {
      if (!r.contig) return notHere("no contiguous baseline for a model served by vLLM’s hybrid KV-cache manager, so nothing to compare.");
      const res = r.metric("contiguous_reserved_bytes");
      const used = r.metric("contiguous_used_bytes");
      const alloc = r.metric("paged_allocated_bytes");
      const mult = r.metric("concurrency_multiplier");
      const ext = r.metric("paged_external_fragmentation");
      // The paged side's sequences holding blocks: running, and any held for a CPU-tier load.
      const pRun = r.paged.metric("num_running", r.step) + (r.paged.metric("num_held", r.step) ?? 0);
      const cRun = r.contig.metric("num_running", r.contigStep);
      if (!pRun || !cRun || !res || !alloc) {
        return notHere(`at t = ${secs(r.time)} ${!pRun ? "the paged" : "the contiguous"} side runs nothing, so ` +
          "there is no batch to compare (the multiplier shows —): scrub to an instant where both run.");
      }
      const want = (res / cRun) / (alloc / pRun);
      const ratioOk = mult !== null && Number.isFinite(mult) && Math.abs(mult - want) <= 1e-9 * Math.max(1, want);
      const usedOk = used === null ? null : used <= res;
      const extOk = ext === null ? null : ext === 0;
      const pass = ratioOk && usedOk !== false && extOk !== false;
      return ok(pass, `(${bytes(res)} ÷ ${int(cRun)}) ÷ (${bytes(alloc)} ÷ ${int(pRun)}) = ${times(want)} ` +
        `${ratioOk ? "=" : "≠"} multiplier ${times(Number.isFinite(mult) ? mult : null)}; contiguous used ${bytes(used)} ` +
        `${usedOk === false ? ">" : "≤"} reserved; paged external fragmentation ${ext === null ? "—" : ext === 0 ? "0" : ext}.`);
    },
  },
  {
    id: "pressure",
    title: "Memory pressure: preemption and swap",
    setup: { preset: "memory-pressure" },
    setupText: "Load Memory pressure",
    toggle: "Play the Memory pressure preset; switch Preemption between recompute and swap.",
    look: "When the pool runs out the scheduler preempts the newest running sequence: under recompute its " +
      "blocks are freed and it waits to prefill again; under swap its blocks go to the CPU pool and come back " +
      "later (swap out / swap in in the event stream).",
    verifies: "Verifies a preempted sequence holds no GPU block",
    condition: "no GPU block is mapped by a sequence that is preempted or swapped out, while one is",
    check(r) {
      const t = r.paged;
      const out = t.sequences().filter(({ row }) => row[S.status] === "preempted" || row[S.status] === "swapped");
      const pre = r.metric("preemptions");
      if (out.length === 0) {
        return notHere(pre ? `no sequence is preempted or swapped out at step ${int(r.step)} (${int(pre)} ` +
          "preemptions so far: scrub to one)." : `nothing has been preempted by step ${int(r.step)}: the pool ` +
          "has not run out here (load Memory pressure and play it).");
      }
      // Both sources: the sequences' block tables, and the blocks' own rows (which requests map them).
      const bad = [];
      const away = (st) => st === "preempted" || st === "swapped";
      const allAway = new Map(); // request -> whether every sequence of it is preempted or swapped
      for (const { row } of t.sequences()) {
        const st = row[S.status];
        allAway.set(row[S.rid], (allAway.get(row[S.rid]) ?? true) && away(st));
        if (away(st) && row[S.table].length) bad.push(`${r.name(row[S.rid], row[S.sample])} (${st}) maps P_${row[S.table][0]}`);
      }
      for (let b = 0; b < t.numBlocks && bad.length < 3; b += 1) {
        if (t.refOf(b) === 0) continue;
        for (const rid of t.block(b).request_ids) if (allAway.get(rid)) bad.push(`P_${b} mapped by ${r.name(rid)} (away)`);
      }
      return ok(bad.length === 0, `${int(out.length)} sequence${out.length === 1 ? "" : "s"} preempted or swapped out now` +
        (pre !== null ? `, ${int(pre)} preemptions so far` : "") +
        (bad.length ? `; but ${esc(bad.slice(0, 3).join("; "))}` : "; none of them maps a GPU block."));
    },
  },
  {
    id: "sampling",
    title: "Parallel sampling: fork and copy-on-write",
    setup: { preset: "parallel-sampling" },
    setupText: "Load Parallel sampling",
    toggle: "Play the Parallel sampling preset from step 0; switch Sampling between fork-cow and independent.",
    look: "After the prompt, the samples fork and share every block (ref = samples); the first sample to write " +
      "into the shared partial block copies it (copy-on-write in the stream), full prompt blocks stay shared. " +
      "Independent samples each prefill their own copy.",
    verifies: "Verifies ref counts equal the tables sharing a block",
    condition: "every held block’s ref_cnt equals the block tables holding it, while samples of one request " +
      "share a block",
    check(r) {
      if (r.bundle.query.sampling !== "fork-cow") return notHere("sampling is independent: samples fork nothing, each prefills its own blocks.");
      if (!r.bundle.requests.some((q) => q.num_samples > 1)) return notHere("no request here has more than one sample (load Parallel sampling).");
      const { within } = sharing(r);
      if (within === 0) return notHere(`no block is shared by samples of one request at step ${int(r.step)}: scrub to a step after a fork.`);
      const { checked, bad } = refCountsMatchTables(r);
      const { shared, maxRef } = sharedSummary(r);
      const cow = r.metric("cow_copies");
      return ok(bad.length === 0, `${int(checked)} held blocks, ${int(within)} shared by samples, ${int(shared)} shared in all (max ref ${maxRef}); ` +
        (bad.length ? `ref_cnt differs from the tables holding it at ${esc(bad.slice(0, 3).join("; "))}` : "every ref_cnt equals the tables holding it") +
        (cow !== null ? `; ${int(cow)} copy-on-write copies so far.` : "."));
    },
  },
];

export class Experiments {
  constructor({ root, onApply }) {
    this.root = root;
    this.onApply = onApply;
    root.innerHTML = EXPERIMENTS.map((x, i) => `
      <article class="panel exp" data-exp="${x.id}">
        <header><span class="exp-num">${i + 1}</span><h3>${esc(x.title)}</h3></header>
        <p><b>Toggle:</b> ${esc(x.toggle)}</p>
        <p><b>Look for:</b> ${esc(x.look)}</p>
        <p class="exp-condition"><b>Check:</b> ${esc(x.condition)}.</p>
        <p class="exp-check" data-check="${x.id}" aria-live="polite"></p>
        <footer><span class="exp-verifies">${esc(x.verifies)}</span>
          <button type="button" class="small" data-apply="${x.id}">${esc(x.setupText)}</button></footer>
      </article>`).join("");
    root.addEventListener("click", (ev) => {
      const b = ev.target.closest("[data-apply]");
      if (b) this.onApply(EXPERIMENTS.find((x) => x.id === b.dataset.apply).setup);
    });
  }

  render(replay) {
    for (const x of EXPERIMENTS) {
      const el = this.root.querySelector(`[data-check="${x.id}"]`);
      let res;
      try {
        res = x.check(replay);
      } catch (err) {
        res = { pass: null, text: `cannot check here: ${esc(err.message)}` };
      }
      el.dataset.pass = String(res.pass);
      const verdict = res.pass === true ? "✓ holds" : res.pass === false ? "✗ fails" : "— not here";
      el.innerHTML = `<span class="verdict">${verdict}</span> <span>${res.pass === null ? res.text
        : `${replay.contig && x.id === "contiguous" ? `at t = ${secs(replay.time)} (paged step ${int(replay.step)}, ` +
          `contiguous step ${int(replay.contigStep)})` : `at step ${int(replay.step)}`}: ${res.text}`}</span>`;
    }
    // With state layers the block is raised until it holds a state (vLLM's hybrid manager: 544 tokens
    // for Qwen3-Next), so blocks of 16 and 32 run alike: the toggle would change nothing.
    const states = !!(replay.groups && replay.groups.some((g) => g.kind === "mamba"));
    const button = this.root.querySelector('[data-apply="block-size"]');
    button.disabled = states;
    button.title = states ? `this model’s block is raised to ${int(replay.blockSize)} tokens to hold a state, ` +
      "whether 16 or 32 is asked: both run the same" : "";
    const note = this.root.querySelector('[data-exp="block-size"] .exp-condition');
    note.dataset.raised = String(states);
    note.innerHTML = states
      ? `<b>Check:</b> not on this model: its block is raised to ${int(replay.blockSize)} tokens to hold a ` +
        "state, whether 16 or 32 is asked, so both run the same (a model without state layers shows it)."
      : `<b>Check:</b> ${esc(EXPERIMENTS.find((x) => x.id === "block-size").condition)}.`;
  }
}
