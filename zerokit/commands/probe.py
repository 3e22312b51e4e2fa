"""`zerokit probe`: measure this machine for the step-time model; prints a table, writes a profile JSON.

Only parsing, printing and the exit code live here; the measurements are `zerokit.perf.probe.run_probe` (torch is
imported in the rank processes it starts, never here).
"""

from __future__ import annotations

import json
import sys

import click

from zerokit.commands.preflight import binding_options
from zerokit.errors import EXIT_OK
from zerokit.fileio import check_creatable, check_target, write_atomic


def render_table(perf, raw: dict) -> str:
    """The measured figures, one per line, with where each came from."""
    from zerokit.perf.probe import product_share
    from zerokit.units import format_bytes

    def rate(x: float) -> str:
        return f"{x / 1e9:.2f} GB/s"

    ranks = raw.get("ranks")
    at_once = "one rank" if ranks == 1 else f"{ranks} ranks at once"
    lines = [f"zerokit probe: {perf.name} ({at_once}, torch {raw.get('torch')})", ""]
    rows = [("device memory", format_bytes(raw.get("device_memory_bytes", 0)), "probe")]
    bound = raw.get("core_binding")
    if bound:  # --bind-cores-to-rank: as `deepspeed --bind_cores_to_rank` starts them
        command = " ".join(bound["rank0_command"])
        value = f"{bound['threads_per_rank']} cores and OpenMP threads a rank ({command} for rank 0)"
        rows.append(("ranks bound to cores", value, "probe"))
    for dtype, curve in perf.matmul.items():
        pts = ", ".join(f"{int(s)}: {f / 1e9:.1f}" for s, f in curve)
        rows.append((f"matmul {dtype} GFLOP/s by size", pts, perf.sources.get("matmul", "probe")))
    for product, key in (("forward's", "matmul_forward"), ("input gradient's", "matmul_input_grad")):
        for dtype, curve in getattr(perf, key).items():
            rows.append((f"{product} share, {dtype}", product_share(perf.matmul[dtype], curve),
                         perf.sources.get(key, "probe")))
    for dtype, curve in perf.attention.items():
        pts = ", ".join(f"{int(s)}: {f / 1e9:.1f}" for s, f in curve)
        rows.append((f"attention {dtype} GFLOP/s by size", pts, perf.sources.get("attention", "probe")))
    rows.append(("elementwise by activation size", ", ".join(f"{format_bytes(s)}: {rate(b)}" for s, b in
                                                             perf.elementwise), perf.sources.get("elementwise", "")))
    if raw.get("reference_block_shapes"):  # what fitted the step budget (zerokit.perf.probe.STEP_BUDGET_S)
        rows.append(("  from llama blocks, width x tokens", ", ".join(f"{h} x {t}" for h, t in
                                                                     raw["reference_block_shapes"]), "probe"))
    rows += [
        ("kernel launch", f"{perf.op_overhead_s * 1e6:.1f} us", "probe"),
        ("host->device pinned / pageable", f"{rate(perf.h2d_pinned)} / {rate(perf.h2d_pageable)}", "probe"),
        ("device->host pinned / pageable", f"{rate(perf.d2h_pinned)} / {rate(perf.d2h_pageable)}", "probe"),
    ]
    if perf.device == "gpu":  # ZeRO-3's return of an optimizer-offloaded partition (on a CPU it is the host cast)
        ranks = perf.ranks_measured or 1  # the ranks that copied at once, as the probe measured it
        rows.append(("fp32 host -> bf16 device, blocking",
                     f"{perf.h2d_cast_rate(ranks, 2) / 1e6:.0f} M params/s per rank ({ranks} at once)",
                     perf.sources.get("h2d_cast_params_per_s", "")))
    rows += [
        ("collective bus bandwidth", rate(perf.intra_node_bandwidth),
         f"probe ({(raw.get('collectives') or {}).get('backend', 'one rank: not measured')})"),
        ("collective latency", f"{perf.collective_latency_s * 1e6:.0f} us", "probe"),
        ("CPU Adam, whole node", f"{perf.cpu_adam_params_per_s / 1e6:.0f} M params/s",
         perf.sources.get("cpu_adam_params_per_s", "")),
        ("host fp32->bf16 cast, whole node", f"{perf.host_cast_rate / 1e6:.0f} M params/s",
         perf.sources.get("host_cast_params_per_s", "")),
        ("optimizer step on the device", f"{perf.device_adam_params_per_s / 1e6:.0f} M params/s per rank",
         perf.sources.get("device_adam_params_per_s", "")),
        *_lora_rows(perf),
        ("gradient-bucket flush", f"{perf.bucket_flush_s * 1e6:.0f} us", perf.sources.get("bucket_flush_s", "")),
        ("ZeRO-3 hooks per module, pass", f"{perf.zero3_module_overhead_s * 1e6:.0f} us",
         perf.sources.get("zero3_module_overhead_s", "")),
        ("compute in a DeepSpeed step", f"x {perf.compute_scale:.2f} the kernel figures' time",
         perf.sources.get("compute_scale", "")),
        *_reference_steps(raw.get("engine_step")),
        *_host_rows(perf),
        ("NVMe read / write", f"{rate(perf.nvme_read)} / {rate(perf.nvme_write)}", perf.sources.get("nvme", "")),
        ("inter-node network", rate(perf.inter_node_bandwidth), perf.sources.get("inter_node_bandwidth", "")),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, source in rows:
        lines.append(f"  {name:{width}}  {value}")
        if source and source != "probe":
            lines.append(f"  {'':{width}}  ({source})")
    for note in (thread_note(raw), steadiness_note(raw.get("engine_step"))):
        if note:
            lines += ["", note]
    return "\n".join(lines) + "\n"


def _lora_rows(perf) -> list[tuple[str, str, str]]:
    """The figures LoRA and QLoRA plans read (dropout's mask, the 4-bit linears' extra time), where measured."""
    from zerokit.perf.probe import quantized_summary

    rows = []
    if perf.dropout_elements_per_s:
        rows.append(("LoRA dropout (bf16, p = 0.05)", f"{perf.dropout_elements_per_s / 1e6:,.0f} M elements/s per rank",
                     perf.sources.get("dropout_elements_per_s", "")))
    if perf.dequant_elements_per_s:
        fit = {"overhead_s": perf.quantized_linear_overhead_s, "elements_per_s": perf.dequant_elements_per_s}
        rows.append(("4-bit linear over bf16 (QLoRA)", quantized_summary(fit), perf.sources.get("quantized_linear", "")))
    return rows


def _host_rows(perf) -> list[tuple[str, str, str]]:
    """A GPU host's own time, where the probe timed it (`MachinePerf.host_op_s`): what paces a micro-batch of few
    tokens."""
    if not perf.host_op_s:
        return []
    source = perf.sources.get("host_op_s", "")
    kernel = f"{perf.host_op_s * 1e6:.1f} us, {perf.host_adapter_s * 1e6:.0f} us per LoRA-adapted linear"
    flush = f"{perf.host_flush_s * 1e6:.0f} us, {perf.host_optimizer_s * 1e3:.1f} ms"
    return [("host time per kernel (few tokens)", kernel, source),
            ("host time per flush, optimizer step", flush, source)]


def _reference_steps(ref: dict | None) -> list[tuple[str, str, str]]:
    """The table's row saying how the reference engines ran (a slow machine runs fewer tokens and rounds)."""
    if not ref or "rounds" not in ref:
        return []
    steps = f"{ref['rounds']} alternated rounds, {ref['micro_batch']} x {ref['seq_len']} tokens a step"
    zero2 = (ref.get("round_steps_s") or {}).get("zero2")
    if zero2:  # how steady the machine was: a shared VM's speed can shift between rounds
        low, high = min(zero2), max(zero2)
        steps += f"; ZeRO-2 steps {low:.3g}-{high:.3g} s over the rounds (+{high / low - 1:.0%})"
    return [("  from reference training steps", steps, "probe")]


UNSTEADY_SPREAD = 0.40
"""How far apart the reference's ZeRO-2 steps may run over the probe's rounds before the probe says the machine was
not steady. Quiet, the AMD EPYC here ran them within 9-24% (2026-11-28/29); under the load the sessions' own jobs
left behind, within 61%, and that probe's ZeRO-3 hook figure came out at 734 us a module, 276 on the quiet one."""


def steadiness_note(ref: dict | None) -> str | None:
    """A note when the reference's ZeRO-2 steps ran more than UNSTEADY_SPREAD apart over the rounds: the machine's
    speed shifted while it was measured (a shared VM, another job), so the figures, the engine factor and the hook
    figure among them, mix a busy moment's with a quiet one's."""
    zero2 = ((ref or {}).get("round_steps_s") or {}).get("zero2")
    if not zero2 or min(zero2) <= 0:
        return None
    low, high = min(zero2), max(zero2)
    if high / low - 1 <= UNSTEADY_SPREAD:
        return None
    return (f"note: the reference's ZeRO-2 steps ran {low:.3g}-{high:.3g} s over the rounds (+{high / low - 1:.0%}, "
            f"more than {UNSTEADY_SPREAD:.0%}): the machine's speed shifted while it was measured, so these figures "
            "mix a busy moment's with a quiet one's. Probe again when nothing else runs on it.")


def thread_note(raw: dict) -> str | None:
    """On DeepSpeed's CPU accelerator, a warning when the ranks' OpenMP threads outnumber the cores (torch's default
    with the runner's environment: one thread per core in every rank), else None."""
    from zerokit.perf.machine import oversubscribed

    ranks, threads, cores = raw.get("ranks"), raw.get("threads_per_rank"), raw.get("cores")
    if raw.get("device") != "cpu" or not (ranks and threads and cores) or raw.get("core_binding"):
        return None  # (bound: each rank's threads are its own cores' share)
    per_rank = oversubscribed(ranks, threads, cores)
    if per_rank is None:
        return None
    return (f"note: {ranks} ranks x {threads} threads on {cores} cores: OpenMP's threads outnumber the cores, and "
            f"small ops stall under any other load (a 64^3 bf16 matmul took 82 ms instead of 0.2 ms on a 2-core "
            f"VM). Probe and train with OMP_NUM_THREADS={per_rank} (what `deepspeed --bind_cores_to_rank` sets).")


@click.command("probe", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("-o", "--output", metavar="PATH", help="Write the profile JSON here, atomically; an existing file is "
              "kept unless --force is given. `zerokit plan --hardware PATH` reads it.")
@click.option("--force", is_flag=True, help="Let -o/--output overwrite an existing file.")
@click.option("--nvme-path", metavar="PATH", help="Measure NVMe read/write bandwidth with a temporary file here.")
@click.option("--ranks", metavar="N", help="Local ranks to measure at once (default: one per GPU; 2 on DeepSpeed's "
              "CPU accelerator). Use the --num_gpus your `deepspeed` runs start.")
@binding_options("Start each rank as `deepspeed --bind_cores_to_rank` (and `zerokit launch --bind-cores-to-rank`) "
                 "does: numactl on its share of the cores, OMP_NUM_THREADS that share. Probe so when the job will "
                 "run so.")
@click.option("--quick", is_flag=True, help="A rough probe in seconds: tiny sizes, few repeats (for tests).")
def command(output: str | None, force: bool, nvme_path: str | None, ranks: str | None, bind_cores_to_rank: bool,
            bind_core_list: str | None, quick: bool) -> int:
    """Measure this machine for the step-time model: matmul, memory, copies, collectives, CPU Adam, NVMe.

    \b
    Every measurement runs on all local ranks at once, started as the deepspeed runner starts them, so the
    figures are what a real run meets. Progress goes to stderr, the table to stdout. Exit 0, or 2 on bad input.

    \b
      zerokit probe -o profile.json --nvme-path /local_nvme
      zerokit plan --model llama-2-7b --hardware profile.json --seq-len 4096
    """
    from zerokit.units import parse_positive_int

    if output is not None:
        check_target(output, "-o", force, example="profile.json")  # refused before a minute of measuring
        check_creatable(output, "-o")
    from zerokit.perf import profile_to_json
    from zerokit.perf.probe import MAX_RANKS, run_probe

    n_ranks = parse_positive_int(ranks, "--ranks", maximum=MAX_RANKS) if ranks is not None else None

    from zerokit.launch.runner import check_core_list

    check_core_list(bind_cores_to_rank, bind_core_list)
    perf, raw = run_probe(ranks=n_ranks, nvme_path=nvme_path, quick=quick,
                          progress=lambda line: click.echo(line, err=True), bind_cores_to_rank=bind_cores_to_rank,
                          bind_core_list=bind_core_list)
    sys.stdout.write(render_table(perf, raw))
    if output is not None:
        write_atomic(output, json.dumps(profile_to_json(perf, raw), indent=1) + "\n", "-o", force=force)
        sys.stdout.write(f"profile written to {output}\n")
    sys.stdout.flush()
    return EXIT_OK
