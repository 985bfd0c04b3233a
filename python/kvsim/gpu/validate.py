"""`python -m kvsim.gpu.validate` (also `kvsim validate-gpu`): numerics, bytes and step-time calibration on
real torch tensors, written to `results/gpu_validation.md` and `.json` (and `results/calibration/`).

Runs on CUDA when present (`--device cuda`), else on CPU at small sizes; a CPU report says so at its top
and its timing is a smoke run of the code, not a calibration. Exit status 0 when every check passes, 1
when one fails, 2 on bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvsim.errors import KvsimError

DEFAULT_MODEL = "llama-3-8b"


DESCRIPTION = (
    "Validate kvsim on real tensors (torch, the gpu extra): paged-attention numerics from a simulated run's "
    "block tables, KV bytes against kvsim's sizing, and a step-time calibration of the linear time model. "
    "Writes <out>/gpu_validation.md and .json and <out>/calibration/<gpu>-<model>.json."
)


def build_parser(prog: str = "python -m kvsim.gpu.validate") -> argparse.ArgumentParser:
    from kvsim.cli.flags import Parser  # a bad flag value is one line, as under `kvsim validate-gpu`

    p = Parser(prog=prog, formatter_class=argparse.ArgumentDefaultsHelpFormatter, description=DESCRIPTION)
    add_arguments(p)
    return p


def add_subparser(sub: Any) -> argparse.ArgumentParser:
    """`kvsim validate-gpu`: the same flags under the `kvsim` command."""
    p = sub.add_parser(
        "validate-gpu",
        help="validate on real tensors with torch: results/gpu_validation.md",
        description=DESCRIPTION,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags (shared by `kvsim validate-gpu`)."""
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, cuda:N")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model preset (kvsim.models.names())")
    p.add_argument("--quick", action="store_true", help="smaller run and calibration grid")
    p.add_argument("--layers", type=int, default=2, help="layers of the model the numerics pool holds")
    p.add_argument("--out", type=Path, default=Path("results"), help="folder for the report")
    p.add_argument(
        "--ship",
        action="store_true",
        help="also copy a CUDA calibration into the package (kvsim/calibrations/) so it loads by name",
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _versions(torch: Any, device: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
    }
    if device.startswith("cuda"):
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        out["device"] = torch.cuda.get_device_name(dev)
        out["compute_capability"] = f"{props.major}.{props.minor}"
        out["device_memory"] = int(props.total_memory)
        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version()
        driver = "unknown (nvidia-smi not found)"
        if shutil.which("nvidia-smi"):
            res = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=False,
            )
            driver = (
                res.stdout.strip().splitlines()[0] if res.returncode == 0 and res.stdout.strip() else driver
            )
        out["driver"] = driver
    else:
        out["device"] = "CPU"
        out["cuda"] = None
        out["driver"] = None
    return out


def calibration_record(
    model: Any, device: str, measured: dict[str, Any], versions: dict[str, Any]
) -> dict[str, Any]:
    """The calibration JSON: device, versions, grid, coefficients, errors, the roofline and the ratios."""
    from kvsim.gpu.bytes import gpu_preset_for
    from kvsim.model.linear_time import linear_time_model

    cuda = device.startswith("cuda")
    preset = gpu_preset_for(versions["device"]) if cuda else None
    name = f"{preset or 'cpu'}-{model.name}" if cuda else f"cpu-{model.name}"
    fit = measured["fit"]
    rec: dict[str, Any] = {
        "kvsim_calibration": 1,
        "name": name,
        "model": model.name,
        "device": versions["device"],
        "device_kind": "cuda" if cuda else "cpu",
        "gpu_preset": preset,
        "versions": versions,
        "coefficients": {k: fit[k] for k in ("c0_ps", "c_tok_ps", "c_ctx_ps")},
        "fit": fit,
        "shapes": measured["shapes"],
        "timing": measured["timing"],
        "grid": measured["grid"],
    }
    if not cuda:
        rec["note"] = "CPU smoke run at tiny shapes with wall-clock timing: not a calibration to ship"
        rec["roofline"] = None
        rec["ratio_to_roofline"] = "not computed: CPU timings at tiny shapes have no GPU roofline"
    elif preset is None:
        rec["roofline"] = None
        rec["ratio_to_roofline"] = f"not computed: no kvsim.gpus preset for {versions['device']!r}"
    else:
        tm = linear_time_model(model, preset)
        roof = {"c0_ps": tm.c0_ps, "c_tok_ps": tm.c_tok_ps, "c_ctx_ps": tm.c_ctx_ps}
        rec["roofline"] = {"gpu": preset, **roof}
        rec["ratio_to_roofline"] = {k: fit[k] / v for k, v in roof.items()}
    return rec


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def report_markdown(data: dict[str, Any]) -> str:
    """The human-readable report (every figure of the JSON that matters)."""
    v, cuda = data["versions"], data["device_kind"] == "cuda"
    lines = [f"# GPU validation ({'CUDA' if cuda else 'CPU'})", ""]
    if not cuda:
        lines += [
            "**Device: CPU.** This is the CPU path at small sizes: the numerics and bytes checks are the same "
            "code as on a GPU, the timings are wall-clock at tiny shapes and are not a calibration.",
            "",
        ]
    lines += [
        f"Command: `{data['command']}`; {data['wall_s']:.1f} s; overall: **{'PASS' if data['passed'] else 'FAIL'}**.",
        "",
        "| | |",
        "|---|---|",
    ]
    for key in (
        "device",
        "compute_capability",
        "device_memory",
        "driver",
        "cuda",
        "cudnn",
        "torch",
        "python",
        "platform",
        "cpu",
    ):
        if key in v:
            lines.append(f"| {key} | {v[key]} |")
    n = data["numerics"]
    lines += [
        "",
        "## Paged attention numerics",
        "",
        f"A `kvsim.simulate` run ({n['requests']} requests: half share one of two system prompts, half ask "
        f"for 3 fork-cow samples; {n['num_blocks']} blocks of {n['block_size']}; {n['events']} events: "
        f"{n['summary']['prefix_hit_tokens']} prefix-hit tokens, {n['summary']['cow_copies']} CoW copies, "
        f"{n['summary']['evictions']} evictions, {n['summary']['preemptions']} preemptions) replayed from its "
        f"event log into real pools `[num_blocks, block_size, kv_heads, head_dim]` for {n['layers']} layers of "
        f"{n['model']} (random K/V, real head counts). Each finished sequence's decode attention: gathered "
        "blocks vs a contiguous copy (must be 0), vs `scaled_dot_product_attention` and vs float64.",
        "",
        "| dtype | sequences | cross-sequence reads | K/V bit mismatches | vs contiguous | vs SDPA abs (max) | vs SDPA rel | vs fp64 abs (max) | vs fp64 rel | thresholds (SDPA, fp64) | double / shared writes | table mismatches | CoW copies / parent changed | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dt, r in n["dtypes"].items():
        if r["skipped"]:
            lines.append(f"| {dt} | skipped: {r['skipped']} |" + " |" * 12 + " skip |")
            continue
        t = r["thresholds"]
        lines.append(
            f"| {dt} | {r['sequences_checked']} | {r['cross_reads']} | {r['kv_mismatches']} | {_fmt(r['max_abs_vs_contiguous'])} "
            f"| {_fmt(r['max_abs_vs_sdpa'])} | {_fmt(r['max_rel_vs_sdpa'])} | {_fmt(r['max_abs_vs_fp64'])} "
            f"| {_fmt(r['max_rel_vs_fp64'])} | {_fmt(t['vs_sdpa'])}, {_fmt(t['vs_fp64'])} "
            f"| {r['double_writes']} / {r['shared_writes']} | {r['table_mismatches']} "
            f"| {r['cow_copies']} / {r['cow_parent_changed']} | {'pass' if r['passed'] else 'FAIL'} |"
        )
    b = data["bytes"]
    lines += [
        "",
        "## Bytes",
        "",
        f"{b['model']} ({b['kv_dtype']} KV, {b['kv_bytes_per_token']} B per token, block {b['block_size']}), "
        f"KV budget {b['kv_cache_bytes']} B -> `kvsim.pool_blocks` = {b['pool_blocks']} blocks (the null block one of them, as vLLM v1 counts).",
        "",
        "| what | kvsim predicts (B) | measured (B) | how | allocator overhead (B) | agree |",
        "|---|---|---|---|---|---|",
        f"| paged pool (all layers, K and V) | {b['pool']['predicted']} | {b['pool']['measured']} | {b['pool']['how']} | {b['pool']['allocator_overhead']} | {b['pool']['agree']} |",
        f"| paged run's peak: {b['paged_peak']['blocks']} held blocks | {b['paged_peak']['summary_bytes']} | {b['paged_peak']['measured']} | {b['paged_peak']['how']} | {b['paged_peak']['allocator_overhead']} | {b['paged_peak']['agree']} |",
        f"| orca-max peak: {b['contiguous_peak']['requests']} reservations, {b['contiguous_peak']['tokens']} slots | {b['contiguous_peak']['summary_bytes']} | {b['contiguous_peak']['measured']} | {b['contiguous_peak']['how']} | {b['contiguous_peak']['allocator_overhead']} | {b['contiguous_peak']['agree']} |",
        "",
    ]
    f = b["fits_on_device"]
    if "skipped" in f:
        lines.append(f"Weights + pool on the device: skipped ({f['skipped']}).")
    else:
        lines.append(
            f"Weights + pool on the device: `SimConfig(model={b['model']!r}, gpu={f['preset']!r} at the device's "
            f"{f['device_total']} B, gpu_memory_utilization=0.9)` = {f['num_blocks']} blocks; "
            f"{f['weight_bytes']} B of weights + {f['pool_bytes']} B of pool: "
            + (
                f"fits, {f['share_of_device']:.1%} of the device in use after allocation, "
                f"{f['free_after']} B free; allocator overhead {f['allocator_overhead']} B; "
                f"preset memory equals the device's: {f['preset_matches_device']}."
                if f.get("fits")
                else f"does not fit: {f.get('error')}."
            )
        )
    c = data["calibration"]
    fit = c["fit"]
    lines += [
        "",
        "## Step-time calibration" + ("" if cuda else " (CPU smoke run, not a calibration)"),
        "",
        f"One layer at {'the model' if cuda else 'tiny'} shapes `{c['shapes']}`, {c['timing']}, x "
        f"{c['shapes']['layers']} layers + LM head, over {len(c['grid'])} (batch, context, prefill) points; "
        "least squares on relative error, every 4th point held out.",
        "",
        "| coefficient | fitted (ps) | roofline (ps) | fitted / roofline |",
        "|---|---|---|---|",
    ]
    roof = c["roofline"] or {}
    ratio = c["ratio_to_roofline"]
    for k in ("c0_ps", "c_tok_ps", "c_ctx_ps"):
        r = _fmt(ratio[k]) if isinstance(ratio, dict) else "-"
        lines.append(f"| {k} | {fit[k]} | {roof.get(k, '-')} | {r} |")
    if not isinstance(ratio, dict):
        lines.append(f"\nRatio to the roofline: {ratio}.")
    lines += [
        "",
        f"Fit error (relative): median {_fmt(fit.get('fit_rel_error_median'))}, max {_fmt(fit.get('fit_rel_error_max'))} "
        f"over {fit['fit_points']} fitted points; held out: median {_fmt(fit.get('held_out_rel_error_median'))}, "
        f"max {_fmt(fit.get('held_out_rel_error_max'))} over {fit['held_out_points']} points.",
        f"Saved as `{data['calibration_path']}`"
        + (f", shipped as `{data['shipped_path']}`." if data.get("shipped_path") else "."),
        "",
        "| batch | context | prefill | layer (s) | head (s) | step (s) | fitted (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in c["grid"]:
        pred = (fit["c0_ps"] + fit["c_tok_ps"] * g["tokens"] + fit["c_ctx_ps"] * g["context_tokens"]) / 1e12
        lines.append(
            f"| {g['batch']} | {g['context']} | {g['prefill']} | {_fmt(g['layer_s'])} | {_fmt(g['head_s'])} | {_fmt(g['seconds'])} | {_fmt(pred)} |"
        )
    lines += ["", "Produced by `python -m kvsim.gpu.validate` (DESIGN.md §GPU validation).", ""]
    return "\n".join(lines)


def run(args: argparse.Namespace, prog: str, argv: Sequence[str] = ()) -> int:
    from kvsim.errors import InvalidArgumentError
    from kvsim.model.models import get as get_model

    model = get_model(args.model)
    if model.is_mla:
        raise InvalidArgumentError(f"model {model.name!r} caches an MLA latent; pick one with K/V heads")
    if args.layers < 1 or args.layers > model.num_layers:
        raise InvalidArgumentError(
            f"layers {args.layers} must lie in [1, {model.num_layers}] for {model.name}"
        )
    device = args.device
    if not (device in ("auto", "cpu") or device.startswith("cuda")):
        raise InvalidArgumentError(f"device {device!r} is not one of auto, cpu, cuda, cuda:N")
    try:
        import torch
    except ImportError:
        print(
            f"{prog}: error: torch is not installed: pip install 'kvsim[gpu]' (or make gpu-test)",
            file=sys.stderr,
        )
        return 2
    from kvsim.gpu import bytes as kvbytes
    from kvsim.gpu import calibrate, numerics

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidArgumentError(
            f"device {device!r}: torch sees no CUDA device (torch {torch.__version__})"
        )
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # small tensors: threads only contend (measured 20x faster on 2 cores)
    from tqdm import tqdm

    t0 = time.perf_counter()
    bar = tqdm(total=3, desc="gpu-validate", disable=not sys.stderr.isatty(), file=sys.stderr)
    try:
        versions = _versions(torch, device)
        bar.set_postfix_str("numerics")
        num = numerics.run_numerics(model, device=device, num_layers=args.layers, quick=args.quick)
        bar.update()
        bar.set_postfix_str("bytes")
        byt = kvbytes.run_bytes(model, device=device, quick=args.quick)
        bar.update()
        bar.set_postfix_str("calibration")

        def progress(points: Any) -> Any:
            return tqdm(points, desc="grid", leave=False, disable=not sys.stderr.isatty(), file=sys.stderr)

        measured = calibrate.measure(model, device, quick=args.quick, progress=progress)
        bar.update()
    finally:
        bar.close()
        torch.set_num_threads(threads)
    cal = calibration_record(model, device, measured, versions)
    out: Path = args.out
    (out / "calibration").mkdir(parents=True, exist_ok=True)
    cal_path = out / "calibration" / f"{cal['name']}.json"
    cal_path.write_text(json.dumps(cal, indent=1) + "\n")
    shipped = None
    if args.ship:
        if cal["device_kind"] != "cuda":
            raise InvalidArgumentError("--ship: only a CUDA calibration is shipped, this one ran on the CPU")
        from kvsim.model.linear_time import CALIBRATION_DIR

        CALIBRATION_DIR.mkdir(exist_ok=True)
        shipped = CALIBRATION_DIR / cal_path.name
        shutil.copyfile(cal_path, shipped)
    data = {
        "command": " ".join([prog, *argv]),
        "device_kind": cal["device_kind"],
        "versions": versions,
        "model": model.name,
        "quick": args.quick,
        "numerics": num,
        "bytes": byt,
        "calibration": {
            k: cal[k] for k in ("fit", "shapes", "timing", "grid", "roofline", "ratio_to_roofline")
        },
        "calibration_path": str(cal_path),
        "shipped_path": str(shipped) if shipped else None,
    }
    data["passed"] = bool(num["passed"] and byt["passed"])
    data["wall_s"] = time.perf_counter() - t0
    (out / "gpu_validation.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    (out / "gpu_validation.md").write_text(report_markdown(data))
    print(
        f"{'PASS' if data['passed'] else 'FAIL'} on {versions['device']} in {data['wall_s']:.1f} s: "
        f"{out / 'gpu_validation.md'}, {out / 'gpu_validation.json'}, {cal_path}"
    )
    return 0 if data["passed"] else 1


def main(argv: Sequence[str] | None = None, prog: str = "python -m kvsim.gpu.validate") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    try:
        return run(args, prog, argv)
    except KvsimError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2


__all__ = [
    "DESCRIPTION",
    "add_arguments",
    "add_subparser",
    "build_parser",
    "calibration_record",
    "main",
    "report_markdown",
    "run",
]

if __name__ == "__main__":
    sys.exit(main())
