"""`kvsim run`'s flags (and `kvsim plan`'s, which takes the same inputs): the parser, its groups and its
help. The knobs' flags come from `kvsim.model.config.KNOBS`, vLLM's spelling first; `--help` groups them
as a reader looks for them (the workload; vLLM's engine flags; vLLM v0's; kvsim's own; the fleet;
output), leads with examples and names each flag's aliases once, without repeating its metavar.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from kvsim.analysis.sweep import CONFIG_FIELDS, WORKLOADS
from kvsim.errors import KvsimError
from kvsim.model.config import CLUSTER_KNOBS, KNOBS


class FlagError(KvsimError):
    """A bad flag value: printed as `kvsim run: error: argument --flag: ...`."""


_WORKLOAD_HELP = "; ".join(f"{k}: {v.description}" for k, v in WORKLOADS.items())
METRICS_POINTER = (
    "Metrics: each is defined once in python/kvsim/engine/metrics.py (serving metrics, vllm bench serve's) and "
    "DESIGN.md §Metrics (the summary's memory and cache metrics)."
)


_BARE: Any = object()  # a bare `--save-result` (vLLM's flag form): save into --result-dir or "."

# SimConfig.preset's names: the defaults' (vLLM 0.34.0), the newest release's by name (the same), then older
# ones in order (DESIGN.md §Presets; a test checks they are all of them).
PRESETS = (
    "vllm-latest",
    "vllm-0.34",
    "vllm-0.33",
    "vllm-0.20",
    "vllm-0.19",
    "vllm-v1",
    "vllm-0.11",
    "vllm-v0",
)


class Parser(argparse.ArgumentParser):
    """kvsim's argument parser: every complaint of argparse's is one line and exit status 2, as kvsim's
    own checks print them (a CLI error is one line): one flag's value (an invalid choice, a missing
    value, `invalid int value`; its messages start with `argument --flag:`) as it is; a missing or
    unknown argument with a pointer to the command's `--help` in place of its usage (the usage of `kvsim
    plan` is 69 lines). Subparsers inherit the class (argparse's `parser_class` default).

    A negative value with a unit (`--kv-cache-memory-bytes -12GiB`, `--pd-link-latency -5ms`) is a value,
    as a bare negative number is to argparse: argparse took it for an unknown flag and said "expected one
    argument", where `=-12GiB` reached the flag's own error ("must not be negative"). (No kvsim flag is
    a dash and a digit, which argparse's rule guards against.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import re

        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(\d[\d_]*\.?\d*|\.\d+)([eE][+-]?\d+)?\s*[A-Za-z/]*$")

    def error(self, message: str) -> NoReturn:
        if not message.startswith("argument "):
            message = f"{message} (see: {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {message}\n")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks; adds `(default: X)` to a flag whose help names no default
    and whose default is a value (not None, not False); writes a flag with aliases as `--flag METAVAR,
    --alias, --alias_2` (argparse repeats the metavar, choices lists included, after every alias)."""

    def __init__(self, prog: str, *args: Any, **kwargs: Any) -> None:
        import shutil

        kwargs.setdefault("max_help_position", 32)
        kwargs.setdefault("width", min(100, shutil.get_terminal_size().columns - 2))
        super().__init__(prog, *args, **kwargs)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        # `--name_as_is` twins `--name-as-is` (every knob takes both; the description says so once).
        flags = action.option_strings
        shown = [f for f in flags if f == f.replace("_", "-") or f.replace("_", "-") not in flags]
        if action.nargs == 0:
            return ", ".join(shown)
        first = super()._format_action_invocation(
            argparse.Action(
                shown[:1], action.dest, nargs=action.nargs, metavar=action.metavar, choices=action.choices
            )
        )
        return ", ".join([first, *shown[1:]])

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS, []):
            return text
        if action.option_strings:
            return f"{text} (default: {action.default})"
        return text


def _fmt_default(name: str) -> str:
    """A knob's default for `--help`, in its unit."""
    from kvsim.model.units import fmt_bytes, fmt_duration_ps

    k = KNOBS[name]
    d = k.default
    if d is None:
        return ""
    if isinstance(d, bool):
        return "on" if d else "off"
    if k.kind == "bytes":
        return fmt_bytes(d)
    if k.kind == "duration":
        return fmt_duration_ps(d).replace(" ", "")
    return str(d)


class _Given(argparse.Action):
    """Stores `(flag as typed, text)`: the value is converted later by its knob's rule, and an error
    names the flag the user typed."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, (option_string, values))


class _Joined(argparse.Action):
    """A repeatable flag (`--router-weight prefix=3 --router-weight queue=1`): the texts joined by commas,
    converted later as one value (`prefix=3,queue=1`)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        before = getattr(namespace, self.dest, None)
        text = values if before is None else f"{before[1]},{values}"
        setattr(namespace, self.dest, (option_string, text))


class _CommaList(argparse.Action):
    """A comma list given more than once (`--percentile-metrics ttft --percentile-metrics e2el`): the
    lists joined (the last one replaced the others); the first replaces the default."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        seen = f"_{self.dest}_given"
        before = getattr(namespace, self.dest) if getattr(namespace, seen, False) else None
        setattr(namespace, self.dest, values if before is None else f"{before},{values}")
        setattr(namespace, seen, True)


class _Switch(argparse.Action):
    """A vLLM-style switch: `--enable-x` turns it on, `--no-enable-x` off; `--enable-x false` (today's
    spelling, with a value) is kept as an alias."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        assert option_string is not None
        if option_string.startswith("--no-"):
            setattr(namespace, self.dest, (option_string, "false"))
        else:
            setattr(namespace, self.dest, (option_string, "true" if values is None else values))


def _knob_flags(name: str) -> list[str]:
    """Every spelling of knob `name`: vLLM's first (if any), then `--name-with-dashes`, `--name_as_is`."""
    k = KNOBS[name]
    dashed = f"--{name.replace('_', '-')}"
    flags = [*k.flags, dashed]
    if "_" in name:
        flags.append(f"--{name}")
    return list(dict.fromkeys(flags))


_UNIT_TEXT = {
    "bytes": "a size: 12GiB, 512MiB, 1.5GB; a bare number is bytes",
    "gib": "GiB, as vLLM's flag: 64, 0.5; or a size with its unit: 512MiB",
    "duration": "a time: 1ms, 120us, 5ns; a bare number is picoseconds",
    "seconds": "a time: 1ms, 100ms; a bare number is seconds",
    "weights": "NAME=WEIGHT, repeatable or comma-separated",
}


# `--help`'s groups of the knobs, in the order shown: vllm serve's engine flags (0.34.0's, as 0.33.0's; kvsim
# reads them as vLLM does), vLLM v0's that 0.34.0 and 0.33.0 no longer have, kvsim's own, and the fleet's.
VLLM_FLAGS = (
    "model",
    "block_size",
    "num_blocks",
    "kv_cache_bytes",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "kv_cache_dtype",
    "max_model_len",
    "enable_prefix_caching",
    "max_num_seqs",
    "max_num_batched_tokens",
    "chunked_prefill",
    "watermark",
    "kv_offloading_size",
)
VLLM_V0_FLAGS = ("preemption", "swap_space_bytes")
GROUPS = {
    "vllm": "vLLM's engine flags (vllm serve's spelling and meaning; kvsim's own spellings are aliases)",
    "vllm-v0": "vLLM v0's flags (gone from vLLM 0.33.0 and 0.34.0, whose engine preempts by recompute only)",
    "kvsim": "kvsim's own knobs (no vllm serve flag: the GPU, the policy, scheduling rules, time)",
    "fleet": "fleet: replicas behind a router (kvsim.simulate_cluster)",
}


def knob_group(name: str) -> str:
    """The `--help` group of knob `name` (a key of `GROUPS`)."""
    if name in VLLM_FLAGS:
        return "vllm"
    if name in VLLM_V0_FLAGS:
        return "vllm-v0"
    return "fleet" if name in CLUSTER_KNOBS else "kvsim"


def _add_knob_flags(groups: dict[str, Any]) -> None:
    order = [*VLLM_FLAGS, *VLLM_V0_FLAGS, *(n for n in CONFIG_FIELDS if n not in VLLM_FLAGS + VLLM_V0_FLAGS)]
    for name in order:
        g = groups[knob_group(name)]
        k = KNOBS[name]
        flags = _knob_flags(name)
        default = _fmt_default(name)
        unit = _UNIT_TEXT.get(k.kind) or (k.unit if k.unit in ("tokens", "blocks", "sequences") else "")
        if name == "swap_space_bytes":
            unit = (
                "vLLM v0's --swap-space, 4 GiB by default there; vLLM v1 has no CPU swap and 0.33.0 and 0.34.0 "
                "no such flag; read only by --preemption-mode swap or auto, refused with recompute; a size: 4GiB; "
                "after --swap-space a bare number is GiB, as in vLLM v0; default: unset, no CPU pool"
            )
        if default and k.kind not in ("bytes", "duration"):
            default = str(k.default)
        tail = "; ".join(x for x in (unit, f"default: {default}" if default else "") if x)
        text = f"{k.help} ({tail})" if tail else k.help
        if k.kind == "bool":
            g.add_argument(
                *flags, dest=f"cfg_{name}", action=_Switch, nargs="?", metavar="BOOL", default=None, help=text
            )
            offs = [f"--no-{f[2:]}" for f in flags if f.startswith("--") and "_" not in f]
            g.add_argument(
                *offs, dest=f"cfg_{name}", action=_Switch, nargs=0, default=None, help=f"turn {flags[0]} off"
            )
            continue
        metavar = "{" + ",".join(k.choices) + "}" if k.kind == "choice" else (k.metavar or "VALUE")
        action = _Joined if k.kind == "weights" else _Given
        g.add_argument(*flags, dest=f"cfg_{name}", action=action, metavar=metavar, default=None, help=text)
        if name == "hybrid_kv_cache_manager":  # vLLM's switch, without a value
            g.add_argument(
                "--disable-hybrid-kv-cache-manager",
                dest=f"cfg_{name}",
                action="store_const",
                const=("--disable-hybrid-kv-cache-manager", "off"),
                default=None,
                help="vLLM's spelling of --hybrid-kv-cache-manager off",
            )


# --gpu-* flags describing a GPU (kvsim.gpus.from_spec's keys): alone they describe a new GPU (memory,
# bandwidth and tflops needed), after --gpu NAME they replace that preset's figures.
GPU_FLAGS = {
    "--gpu-memory": ("memory", "SIZE", "device memory as the driver reports it: 48GiB, 23034MiB"),
    "--gpu-bandwidth": ("bandwidth", "RATE", "memory bandwidth: 864GB/s, 3.35TB/s"),
    "--gpu-tflops": ("tflops", "TFLOPS", "peak dense bf16 tensor TFLOPS (the roofline's rate)"),
    "--gpu-fp8-tflops": ("fp8_tflops", "TFLOPS", "peak dense fp8 tensor TFLOPS (kept for reference)"),
    "--gpu-fp4-tflops": ("fp4_tflops", "TFLOPS", "peak dense fp4 tensor TFLOPS (kept for reference)"),
    "--gpu-link": ("link", "RATE", "host link, one direction: 32GB/s (PCIe 4.0 x16, the default), 64GB/s"),
    "--gpu-arch": (
        "arch",
        "ARCH",
        "architecture vLLM picks kernels by: sm_90 (compute capability 9.0), gfx942",
    ),
    "--gpu-name": ("name", "NAME", "the described GPU's name in the output (default: custom-gpu)"),
}


def _add_gpu_flags(g: Any) -> None:
    for flag, (key, metavar, text) in GPU_FLAGS.items():
        g.add_argument(flag, dest=f"gpu_{key}", metavar=metavar, default=None, help=text)


def _add_workload_flags(p: argparse.ArgumentParser, *, many: bool) -> None:
    p.add_argument(
        "--workload",
        action="append" if many else "store",
        metavar="NAME[:K=V,...]" if many else "NAME[:K=V,...]|PATH",  # a sweep's workloads are named
        default=None,
        help=(
            "workload, optionally with parameters (sharegpt:arrival_rate=4,max_tokens=2048; other keys go "
            "to synthetic()'s length_params, a/b is a range; every workload takes start=, stop= (a row "
            "window), time_scale= or request_rate=)"
            + (
                ", repeatable (crossed with the grid)"
                if many
                else "; or a csv/jsonl/parquet file of your own (see --trace-columns)"
            )
            + f". Names: {_WORKLOAD_HELP} (default: sharegpt)"
        ),
    )
    p.add_argument(
        "--requests",
        "--num-prompts",
        type=str,
        default=None,
        metavar="N",
        help="requests per simulation (traces: the first N rows; vllm bench serve's --num-prompts, which "
        "sends 1000 when not given) (default: 10000)",
    )
    p.add_argument(
        "--backend",
        choices=("rust", "reference"),
        default=None,
        help="engine: rust (fast) or reference (the pure-Python spec) (default: rust)",
    )


def add_run_inputs(p: argparse.ArgumentParser) -> None:
    """What one run simulates: `--toml`, the workload flags and the SimConfig knobs in their groups
    (`kvsim run`'s and `kvsim plan`'s)."""
    p.add_argument("--toml", metavar="PATH", help="read the run from a TOML file (flags override it)")
    w = p.add_argument_group(
        "workload (vllm bench serve's --num-prompts and --request-rate; kvsim's workloads)"
    )
    _add_workload_flags(w, many=False)  # type: ignore[arg-type]
    w.add_argument(
        "--seed",
        default=None,
        metavar="N",
        help="workload seed, an integer >= 0 (default: 0; traces are deterministic and ignore it, with a note)",
    )
    w.add_argument(
        "--trace-columns",
        metavar="OURS=THEIRS,...",
        default=None,
        help="a file workload's column names: arrival, prompt_len, output_len (required), max_tokens, "
        "num_samples, request_id, hash_ids (prompt content: a list of block hash ids per row, 512 tokens "
        "each, as in the Mooncake traces) (default: the same names)",
    )
    w.add_argument(
        "--trace-time-unit",
        "--time-unit",
        choices=("s", "ms", "us"),
        default=None,
        help="unit of a file workload's arrival column (default: s)",
    )
    w.add_argument(
        "--time-scale",
        metavar="FACTOR",
        default=None,
        help="multiply every arrival time by FACTOR (0.5 replays a trace at twice the load) (default: 1)",
    )
    w.add_argument(
        "--request-rate",
        metavar="REQ/S",
        default=None,
        help="rescale arrivals to this mean request rate (vllm bench serve's --request-rate, whose default "
        "inf, every request at once, is --workload NAME:arrivals=all-at-once here; its --burstiness B is "
        ":arrivals=gamma,burstiness=1/sqrt(B): kvsim's burstiness is the gaps' coefficient of variation, "
        "vLLM's the gamma shape) (default: the workload's own)",
    )
    w.add_argument(
        "--rows",
        metavar="START:STOP",
        default=None,
        help="keep rows [START, STOP) of the workload (a trace window) (default: all)",
    )
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()}
    groups["kvsim"].add_argument(
        "--preset",
        choices=PRESETS,
        default=None,
        help="start from a vLLM release's rules (SimConfig.preset; DESIGN.md §Presets): vllm-latest "
        "0.34.0 (the defaults; vllm-0.34 the same), vllm-0.33 0.23-0.33, vllm-0.20 0.20-0.22, vllm-0.19 0.19, "
        "vllm-v1 0.12-0.18, vllm-0.11 0.9.2-0.11, vllm-v0 the v0 engine, each recording its release "
        "(--vllm-release); flags override it (default: none)",
    )
    _add_knob_flags(groups)
    groups["fleet"].add_argument(
        "--prefill-config",
        metavar="KNOB=VALUE,...",
        default=None,
        help="with --prefill-replicas: the prefill pool's own knobs over the decode replicas' "
        "(gpu, tensor_parallel_size, gpu_memory_utilization, kv_cache_memory_bytes, max_num_seqs, "
        "max_num_batched_tokens, ...: kvsim.simulate_cluster's prefill_config; the model, its KV dtype, "
        "sampling and max_model_len stay the decode side's), e.g. gpu=b200,tensor_parallel_size=2 "
        "(default: the decode replicas' config)",
    )
    _add_gpu_flags(p.add_argument_group("a GPU of your own (instead of, or on top of, --gpu NAME)"))


# `kvsim run --help` leads with these (a test parses each).
RUN_EXAMPLES = (
    (
        "a model on a GPU, the pool sized as vLLM sizes it",
        "kvsim run --model llama-3-8b --gpu h100-80gb --workload sharegpt:arrival_rate=8 --requests 2000",
    ),
    (
        "the paper's 12 GiB of OPT-13B KV cache, Orca (Oracle)",
        "kvsim run --model opt-13b "
        "--kv-cache-memory-bytes 12GiB --policy orca-oracle --block-size 32 --workload alpaca --requests 2000",
    ),
    (
        "a block count and a trace of your own",
        "kvsim run --num-gpu-blocks-override 2000 --workload "
        "my_trace.csv --time-unit ms --trace-columns arrival=timestamp,prompt_len=input,output_len=output",
    ),
    (
        "four replicas behind a prefix-aware router, as JSON",
        "kvsim run --model llama-3.1-8b --gpu h100-80gb "
        "--replicas 4 --router prefix-affinity --workload mooncake-conversation --json",
    ),
)


RUN_USAGE = (
    "kvsim run [MODEL] (--model NAME --gpu NAME | --model NAME --kv-cache-memory-bytes SIZE | "
    "--num-gpu-blocks-override N)\n                 [--workload SPEC] [--requests N] [more flags below]"
)


def _run_parser(sub: Any) -> argparse.ArgumentParser:
    examples = "\n".join(f"  # {what}\n  {line}" for what, line in RUN_EXAMPLES)
    p = sub.add_parser(
        "run",
        formatter_class=_Formatter,
        usage=RUN_USAGE,
        help="run one simulation and print its summary",
        description=(
            "Run one simulation and print what vllm bench serve would, plus memory, cache and preemption\n"
            "metrics, and the pool line (what memory is simulated).\n\n"
            f"Examples:\n{examples}\n\n"
            "The pool: --model and --gpu size it as vLLM 0.34.0 does (what the memory measured after\n"
            "warmup holds: device memory - weights / tp - non-torch memory - CUDA graphs - a margin -\n"
            "activations; --kv-cache-sizing profiled: gpu memory utilization x device memory - weights / tp -\n"
            "activations, 0.33.0's), or --model with --kv-cache-memory-bytes, or\n"
            "--num-gpu-blocks-override. Times: with a --gpu, the roofline's step times; without one every\n"
            "step takes 1 ms (time_model ticks), and the report says its times are ticks. Unset knobs take\n"
            "kvsim.model.config.KNOBS' defaults (DESIGN.md §Defaults); --preset starts from a vLLM\n"
            "release's rules; a TOML file (--toml) may hold `workload`, `requests`, `seed`, `backend` and\n"
            "a [config] table. The rules are vLLM 0.34.0's (--preset vllm-latest, or vllm-0.34); --preset\n"
            "vllm-0.33 gives 0.23.0-0.33.0's, older releases' are the other presets of DESIGN.md §Presets. A flag with dashes takes underscores too\n"
            "(--block_size is --block-size)."
        ),
        epilog=METRICS_POINTER,
    )
    p.add_argument(
        "model_arg",
        nargs="?",
        metavar="MODEL",
        default=None,
        help="the model, as vllm serve MODEL takes it (= --model MODEL): a preset, a config.json, or a Hugging "
        "Face id read from the local Hugging Face cache",
    )
    add_run_inputs(p)
    o = p.add_argument_group("output (vllm bench serve's flags where it has one)")
    o.add_argument("--json", action="store_true", help="print the result as one JSON object (for machines)")
    o.add_argument(
        "--save-result",
        metavar="DIR",
        nargs="?",
        const=_BARE,
        default=None,
        help="also write the result (JSON: version, resolved config, workload, seed, pool, metrics) and "
        "the per-request rows (parquet) into DIR; bare, as vllm bench serve's --save-result flag, into "
        "--result-dir or the current folder",
    )
    o.add_argument(
        "--result-dir",
        metavar="DIR",
        default=None,
        help="vllm bench serve's: the folder of a bare --save-result (default: the current folder)",
    )
    o.add_argument(
        "--percentile-metrics",
        action=_CommaList,
        default="ttft,tpot,itl",
        metavar="M1,M2,...",
        help="latency metrics to report, of ttft, tpot, itl, e2el (vllm bench serve's, each defined in "
        "kvsim/engine/metrics.py; itl exactly, from every step's duration and every run of tokens the engines record) "
        "(default: ttft,tpot,itl)",
    )
    o.add_argument(
        "--metric-percentiles",
        action=_CommaList,
        default="99",
        metavar="P1,P2,...",
        help="percentiles of those metrics (default: 99), named as vllm bench serve names them: p99, p99.9 "
        "(--json: p99.9_ttft_ms)",
    )
    o.add_argument(
        "--goodput",
        nargs="+",
        action="extend",  # (repeated, the SLOs add up: the last one replaced the others)
        default=None,
        metavar="METRIC:MS",
        help="SLOs in milliseconds (ttft:500 tpot:50 e2el:2000): report goodput, the requests per second "
        "that met all of them, and SLO attainment (default: none)",
    )
    return p
