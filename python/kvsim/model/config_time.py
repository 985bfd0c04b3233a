"""`SimConfig`'s time model: which one a configuration runs (`time_model`: `auto` resolved, a calibration
checked against it), the coefficients it derives (`linear` from a model and a GPU, `calibrated` from a
calibration, the roofline's), and `time_line`, what a step costs in one line.

`SimConfig` (`kvsim.model.config`) takes these methods from `ConfigTimeModel`, which holds no state of its
own: `SimConfig.__post_init__` calls them once its fields are converted, its limits set and its pool sized.
DESIGN.md §Time model describes the models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.gpus import is_rocm
from kvsim.model.knobs import convert


class ConfigTimeModel:
    """The time model's part of `SimConfig` (a base class of it, never built alone)."""

    if TYPE_CHECKING:
        # SimConfig's fields these methods read and set (SimConfig defines them).
        model: Any
        gpu: Any
        calibration: str | None
        time_model: str
        iteration_time_ps: int
        c0_ps: int | None
        c_tok_ps: int | None
        c_ctx_ps: int | None
        swap_ps_per_block: int
        block_size: int
        kv_cache_dtype: str
        quantization: str | None
        tensor_parallel_size: int
        data_parallel_size: int
        enable_expert_parallel: bool
        pcie_p2p: bool | None
        max_num_seqs: int
        max_num_batched_tokens: int

        @property
        def release_model(self) -> Any: ...

    def _resolve_time_model(self) -> None:
        """`auto`: the roofline when a model and a GPU are named (with a calibration's efficiencies when one
        is given), else ticks; `calibrated` with a roofline calibration is the roofline. A calibration
        given to ticks or linear, a `pcie_p2p` given to anything but the roofline (the others price no
        collectives), or a roofline without a model and a GPU, is refused."""
        named = self.model is not None and self.gpu is not None
        cal = None
        if self.calibration is not None:
            from kvsim.model.linear_time import load_calibration

            cal = load_calibration(self.calibration)
        object.__setattr__(self, "_calibration", cal)
        kind = getattr(cal, "kind", None)
        tm = self.time_model
        if tm == "auto":
            if kind == "linear":
                tm = "calibrated"
            elif kind == "roofline" and not named:
                raise InvalidArgumentError(
                    f"calibration {self.calibration!r} holds the roofline's efficiencies: it needs a model and a "
                    "gpu (--model, --gpu)"
                )
            else:
                tm = "roofline" if named else "ticks"
        elif tm == "calibrated" and kind == "roofline":
            tm = "roofline"
        elif tm in ("ticks", "linear") and cal is not None:
            raise InvalidArgumentError(
                f"calibration {self.calibration!r} needs time_model 'roofline', 'calibrated' or 'auto', not {tm!r}"
            )
        elif tm == "roofline" and kind == "linear":
            raise InvalidArgumentError(
                f"calibration {self.calibration!r} holds linear coefficients (python -m kvsim.gpu.validate): it "
                "needs time_model 'calibrated', not 'roofline'"
            )
        if tm == "roofline" and not named:
            raise InvalidArgumentError(
                "time_model 'roofline' needs a model and a gpu (--model, --gpu) to price a step"
            )
        if self.pcie_p2p is not None and tm != "roofline":
            # (the roofline's "changes nothing here" is for a run whose collectives cross no PCIe; these
            # models price no collectives at all, so the knob cannot apply: refused, as a calibration is)
            why = (
                "ticks are no GPU's time"
                if tm == "ticks"
                else f"time_model {tm!r} prices no collectives between GPUs (its steps are a linear fit)"
            )
            raise InvalidArgumentError(
                f"pcie_p2p {self.pcie_p2p} needs time_model 'roofline' (or 'auto' with a model and a gpu): "
                f"{why}, so it could change nothing; leave it unset (none)"
            )
        object.__setattr__(self, "time_model", tm)

    def _fill_roofline(self) -> None:
        """The roofline's integer coefficients (`kvsim.model.timing.roofline_time_model`) for this model on
        this GPU, with the calibration's efficiencies when given; swap time from PCIe as for `linear`."""
        from kvsim.model.gpus import resolve as resolve_gpu
        from kvsim.model.linear_time import linear_time_model
        from kvsim.model.models import resolve
        from kvsim.model.timing import roofline_time_model

        cal = self._calibration  # type: ignore[attr-defined]
        gpu = resolve_gpu(self.gpu)
        eff = None
        if cal is not None:
            if cal.gpu is not None and cal.gpu != gpu.name:
                raise InvalidArgumentError(
                    f"calibration {self.calibration!r} was fitted on gpu {cal.gpu!r}, not {gpu.name!r}: its "
                    "efficiencies hold for that GPU only"
                )
            eff = cal.efficiencies
        # Each layer's own kind: a window kept as full attention by the KV-cache manager still attends
        # over the window.
        try:
            rt = roofline_time_model(
                resolve(self.release_model),
                gpu,
                tensor_parallel_size=self.tensor_parallel_size,
                data_parallel_size=self.data_parallel_size,
                expert_parallel=self.enable_expert_parallel,
                kv_cache_dtype=None if self.kv_cache_dtype == "auto" else self.kv_cache_dtype,
                quantization=self.quantization,
                efficiencies=eff,
                max_num_batched_tokens=self.max_num_batched_tokens,
                pcie_p2p=self.pcie_p2p,
            )
        except InvalidArgumentError as exc:
            if cal is None or not str(exc).startswith("efficiency "):
                raise
            raise InvalidArgumentError(f"calibration {self.calibration!r}: {exc}") from None
        object.__setattr__(self, "_roofline", rt)
        if self.swap_ps_per_block is None:
            tm = linear_time_model(
                self._served_model(),
                self.gpu,
                block_size=self.block_size,
                kv_dtype=None if self.kv_cache_dtype == "auto" else self.kv_cache_dtype,
                tensor_parallel_size=self.tensor_parallel_size,
                data_parallel_size=self.data_parallel_size,
                expert_parallel=self.enable_expert_parallel,
            )
            object.__setattr__(self, "swap_ps_per_block", int(tm.swap_ps_per_block))

    def _fill_linear_coefficients(self) -> None:
        given = [self.c0_ps, self.c_tok_ps, self.c_ctx_ps]
        if all(c is None for c in given):
            if self.model is None or self.gpu is None:
                raise InvalidArgumentError(
                    "time_model 'linear' needs c0_ps, c_tok_ps, c_ctx_ps, or model and gpu to derive them"
                )
            from kvsim.model.linear_time import linear_time_model

            tm = linear_time_model(
                self._served_model(),
                self.gpu,
                block_size=self.block_size,
                kv_dtype=None if self.kv_cache_dtype == "auto" else self.kv_cache_dtype,
                tensor_parallel_size=self.tensor_parallel_size,
                data_parallel_size=self.data_parallel_size,
                expert_parallel=self.enable_expert_parallel,
            )
            object.__setattr__(self, "c0_ps", int(tm.c0_ps))
            object.__setattr__(self, "c_tok_ps", int(tm.c_tok_ps))
            object.__setattr__(self, "c_ctx_ps", int(tm.c_ctx_ps))
            if self.swap_ps_per_block is None:
                object.__setattr__(self, "swap_ps_per_block", int(tm.swap_ps_per_block))
        for name in ("c0_ps", "c_tok_ps", "c_ctx_ps"):
            value = getattr(self, name)
            if value is None:
                raise InvalidArgumentError(f"{name} None: time_model 'linear' needs all three coefficients")
            convert(name, value)

    def _fill_calibrated_coefficients(self) -> None:
        """`time_model="calibrated"`: the linear model with measured coefficients (DESIGN.md §GPU
        validation); coefficients given explicitly win, swap time comes from the roofline of model + gpu."""
        if self.calibration is None:
            raise InvalidArgumentError(
                "time_model 'calibrated' needs calibration: a shipped name (kvsim.sizing.calibrations()) "
                "or the path of a calibration JSON"
            )
        from kvsim.model.linear_time import linear_time_model

        cal = self._calibration  # type: ignore[attr-defined]
        model = getattr(self.model, "name", self.model)
        if model is not None and model != cal.model:
            raise InvalidArgumentError(
                f"calibration {self.calibration!r} was measured for model {cal.model!r}, not {model!r}"
            )
        for name in ("c0_ps", "c_tok_ps", "c_ctx_ps"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(cal, name))
            convert(name, getattr(self, name))
        if self.swap_ps_per_block is None and self.model is not None and self.gpu is not None:
            tm = linear_time_model(
                self.release_model,
                self.gpu,
                block_size=self.block_size,
                kv_dtype=None if self.kv_cache_dtype == "auto" else self.kv_cache_dtype,
                tensor_parallel_size=self.tensor_parallel_size,
                data_parallel_size=self.data_parallel_size,
                expert_parallel=self.enable_expert_parallel,
            )
            object.__setattr__(self, "swap_ps_per_block", int(tm.swap_ps_per_block))

    def _served_model(self) -> Any:
        """The model as vLLM loads it (`quantization` applied)."""
        from kvsim.model.models import resolve, with_quantization

        return with_quantization(resolve(self.release_model), self.quantization)

    def ticks_why(self) -> tuple[str, str]:
        """Why a run's steps are ticks and how to price them on a GPU: (no GPU named / no model named / ticks
        chosen, the flags that give the roofline)."""
        if self.gpu is not None and self.model is not None:
            return "time_model ticks chosen", "--time-model roofline prices each step on the GPU named"
        if self.gpu is not None:
            return "a GPU but no model named", "--model with the GPU prices each step with the roofline"
        if self.model is not None:
            return "no GPU named", "--gpu NAME prices each step of the model with the roofline"
        return "no GPU named", "--model with --gpu prices each step with the roofline"

    def time_line(self) -> str:
        """What a step costs, one line (`kvsim run` prints it under the pool line): `time: roofline of
        llama-3-8b on h100-80gb, datasheet figures (...): a step of 64 decodes at 1,024 tokens 9.5 ms, a
        prefill chunk of 2,048 tokens 38.1 ms`; ticks say they are ticks."""
        from kvsim.model.units import fmt_duration_ps

        if self.time_model == "ticks":
            why, how = self.ticks_why()
            return f"time: ticks, every step {fmt_duration_ps(self.iteration_time_ps)} ({why}: not a GPU's time; {how})"
        if self.time_model in ("linear", "calibrated"):
            assert self.c0_ps is not None
            assert self.c_tok_ps is not None
            assert self.c_ctx_ps is not None
            what = f"calibration {self.calibration}" if self.time_model == "calibrated" else "linear"
            return (
                f"time: {what}: {fmt_duration_ps(self.c0_ps)} a step + {fmt_duration_ps(self.c_tok_ps)} a token + "
                f"{fmt_duration_ps(self.c_ctx_ps)} a context token read"
            )
        rt = self.roofline
        from kvsim.model.models import model_label
        from kvsim.model.models import resolve as resolve_model

        # (the model as the pool line names it: an alias, deepseek-r1, with the preset it resolves to)
        model = (
            model_label(self.model, resolve_model(self.release_model).name)
            if self.model is not None
            else None
        )
        from kvsim.model.gpus import resolve as resolve_gpu

        gpu = resolve_gpu(self.gpu).name  # (a GPU file by its Gpu's name, as the pool line says it)
        if getattr(self, "_hand_roofline", None) is not None:
            head = "time: roofline of hand-set coefficients"
        elif self.calibration is not None:
            cal = self._calibration  # type: ignore[attr-defined]
            head = (
                f"time: roofline of {model} on {gpu}, calibration {self.calibration} (fitted on {cal.model} on "
                f"{cal.gpu})"
            )
        else:
            head = (
                f"time: roofline of {model} on {gpu}, datasheet figures (efficiencies 1: an optimistic bound; "
                "--calibration NAME for a profiled GPU's)"
            )
        if getattr(self, "_hand_roofline", None) is None:
            experts = self._experts_read()
            if experts:
                head += f", {experts}"
            link = self._collectives_link()
            if link:
                head += f", {link}"
        seqs = min(64, self.max_num_seqs)
        chunk = min(2048, self.max_num_batched_tokens)
        decode = rt.step_ps([(1024, 1)] * seqs)
        prefill = rt.step_ps([(chunk, chunk)])
        return (
            f"{head}: a step of {seqs} decodes at 1,024 tokens {fmt_duration_ps(decode)}, a prefill chunk of "
            f"{chunk:,} tokens {fmt_duration_ps(prefill)}"
        )

    def time_record(self) -> dict[str, Any]:
        """What a run's times are, for `--json` (`time_model`) and the latency table's heading: the time
        model, whether measurements calibrate it (a calibration fitted on a profiled GPU), and a few words
        saying what its times are (`datasheet roofline: optimistic bounds` for a roofline of datasheet
        figures, which the validation runs put 15 % to 73 % under the measured means and medians:
        results/validation.md). The
        numbers are the same either way; the record says how to read them."""
        from kvsim.model.units import fmt_duration_ps

        calibrated = self.calibration is not None
        if self.time_model == "ticks":
            what = f"ticks: {fmt_duration_ps(self.iteration_time_ps)} a step, not a GPU's time"
        elif self.time_model in ("linear", "calibrated"):
            what = (
                f"linear calibration {self.calibration}"
                if calibrated
                else "linear model of given coefficients"
            )
        elif getattr(self, "_hand_roofline", None) is not None:
            what = "roofline of hand-set coefficients"
        elif calibrated:
            what = f"roofline calibrated by {self.calibration}"
        else:
            what = "datasheet roofline: optimistic bounds"
        return {"name": self.time_model, "calibrated": calibrated, "times": what}

    def calibration_record(self) -> dict[str, Any] | None:
        """The calibration the time model uses, for `--json` (`calibration`): its name as given, the
        model and GPU it was fitted on (a linear one's device too), the profile and the file; None
        without one."""
        cal = getattr(self, "_calibration", None)
        if cal is None:
            return None
        out = {
            "name": self.calibration,
            "kind": cal.kind,
            "model": cal.model,
            "gpu": cal.gpu,
            "path": cal.path,
        }
        if cal.kind == "roofline":
            out["source"] = cal.source
        return out

    def calibration_note(self) -> str | None:
        """A roofline calibration fitted on another model than this run's: its efficiencies and per-layer
        overheads were measured on that model's shapes and are carried over, unmeasured, to these (a
        linear calibration on another model is refused). None otherwise."""
        cal = getattr(self, "_calibration", None)
        if cal is None or cal.kind != "roofline" or self.model is None:
            return None
        from kvsim.model.models import resolve as resolve_model

        mine = resolve_model(self.release_model).name
        try:
            fitted = resolve_model(cal.model).name
        except InvalidArgumentError:
            fitted = cal.model  # (a model kvsim does not know: compared by its name)
        if mine == fitted:
            return None
        return (
            f"calibration {self.calibration} was fitted on {cal.model} on {cal.gpu}: its efficiencies and "
            f"per-layer overheads are measured on that model's shapes, and {mine}'s are priced with them "
            f"unmeasured (other widths, layer counts or layer kinds may run at other efficiencies); a "
            f"profile of {mine} on {cal.gpu}, fitted with kvsim calibrate, would measure them"
        )

    def _experts_read(self) -> str:
        """How the roofline reads a mixture-of-experts model's routed experts (DESIGN.md §Time model, "The
        routed experts' read"): at the fused-MoE kernel's measured fraction of HBM by tokens per expert
        (`roofline.FUSED_MOE_MEMORY`) or a calibration's own curve; "" without routed experts."""
        from kvsim.model.roofline import FUSED_MOE_MEMORY

        if not self.roofline.moe_mem_ps:
            return ""
        cal = self._calibration  # type: ignore[attr-defined]
        curve = FUSED_MOE_MEMORY if cal is None else cal.efficiencies.moe_memory
        fracs = [f for _, f in curve]
        span = f"{min(fracs):.2f}-{max(fracs):.2f} of HBM by tokens per expert"
        if curve == FUSED_MOE_MEMORY:
            return (
                "the routed experts' weights read at vLLM's fused-MoE kernel's measured efficiency "
                f"({span}: its benchmark_moe.py on Qwen3-30B-A3B's experts, A100, vllm-project/vllm#19049)"
            )
        return f"the routed experts' weights read at the calibration's fused-MoE efficiency ({span})"

    def _collectives_link(self) -> str:
        """The links the roofline prices the collectives on (`collectives.collective_link`), each with the figure
        it uses: tensor parallelism's all-reduces (tp > 1) and, with DP ranks, a mixture-of-experts model's
        all-gather and reduce-scatter over the DP group (dp GPUs, tp apart) or, sequence-parallel under expert
        parallelism at tp > 1, the EP group's tp · dp GPUs; "" when it prices none. Each link's words name its
        transport (a GPU-to-GPU link, PCIe peer-to-peer, or staged through host memory); a `pcie_p2p` given
        where no collective crosses PCIe is said to change nothing, not left silent."""
        from kvsim.model.collectives import collective_link, moe_collectives
        from kvsim.model.gpus import resolve as resolve_gpu
        from kvsim.model.models import resolve as resolve_model

        gpu = resolve_gpu(self.gpu)
        tp, dp = self.tensor_parallel_size, self.data_parallel_size
        cal = self._calibration  # type: ignore[attr-defined]
        eff = 1.0 if cal is None else cal.efficiencies.link
        scaled = "" if eff == 1.0 else f" (× the calibration's link efficiency {eff:g})"
        parts = []
        links = []
        if tp > 1:
            link = collective_link(gpu, tp, pcie_p2p=self.pcie_p2p)
            links.append(link)
            parts.append(f"tp {tp}'s all-reduces {link.how}{scaled}")
        from kvsim.model.timing import _moe_layer_flags

        model = resolve_model(self.release_model)
        rocm = is_rocm(gpu.arch)
        coll = moe_collectives(model, tp, dp, self.enable_expert_parallel, _moe_layer_flags(model), rocm)
        if coll.gather > 1:
            group = (
                f"the EP group's tp·dp = {coll.gather} GPUs (sequence-parallel)"
                if coll.sequence_parallel
                else f"the DP group's {coll.gather} GPUs" + (f", {tp} apart" if tp > 1 else "")
            )
            link = collective_link(gpu, coll.gather, coll.stride, self.pcie_p2p)
            links.append(link)
            parts.append(f"the MoE layers' all-gather and reduce-scatter over {group} {link.how}{scaled}")
        if self.pcie_p2p is not None and not any(x.pcie for x in links):
            parts.append(
                f"pcie_p2p {'on' if self.pcie_p2p else 'off'} changes nothing here ("
                + ("no collective crosses PCIe between GPUs" if links else "no collective between GPUs")
                + ")"
            )
        return ", ".join(parts)

    @property
    def collective_transport(self) -> str:
        """How the roofline's collectives between GPUs travel, resolved (`pcie_p2p` unset: the GPU's own):
        "peer-link" (NVLink, Infinity Fabric), "pcie-p2p", "host-staged" (PCIe without peer-to-peer), the
        first joined with "+" to one of the others where a group spans peer domains over PCIe, or "none"
        (one GPU, no collective, or a time model that prices none: linear, ticks, hand-set coefficients).
        `--json` and `kvsim sweep`'s rows carry it beside the unresolved `pcie_p2p`."""
        if self.time_model != "roofline" or getattr(self, "_hand_roofline", None) is not None:
            return "none"
        from kvsim.model.collectives import collective_link, moe_collectives, pcie_p2p_of
        from kvsim.model.gpus import resolve as resolve_gpu
        from kvsim.model.models import resolve as resolve_model
        from kvsim.model.timing import _moe_layer_flags

        gpu = resolve_gpu(self.gpu)
        tp, dp = self.tensor_parallel_size, self.data_parallel_size
        model = resolve_model(self.release_model)
        coll = moe_collectives(
            model, tp, dp, self.enable_expert_parallel, _moe_layer_flags(model), is_rocm(gpu.arch)
        )
        links = []
        if tp > 1:
            links.append(collective_link(gpu, tp, pcie_p2p=self.pcie_p2p))
        if coll.gather > 1:
            links.append(collective_link(gpu, coll.gather, coll.stride, self.pcie_p2p))
        if not links:
            return "none"
        p2p = pcie_p2p_of(gpu, self.pcie_p2p)  # (a described GPU's unknown P2P: taken as P2P)
        parts = ["peer-link"] if getattr(gpu, "peer_bandwidth", 0.0) else []
        if any(x.pcie for x in links):
            parts.append("pcie-p2p" if p2p else "host-staged")
        return "+".join(parts) or "none"

    @property
    def roofline(self) -> Any:
        """The roofline's coefficients (`kvsim.model.timing.RooflineTimeModel`) under `time_model="roofline"`,
        else None."""
        return getattr(self, "_roofline", None)
