"""Step time across nodes, predicted against measured: 2-node DeepSpeed trainings (one rank a node) between two
network namespaces whose link is throttled, on this CPU.

    python benchmarks/step_time_nodes.py                      # the table from the committed data
    python benchmarks/step_time_nodes.py --measure --repeats 2 --rate 200mbit \
        --data tests/data/step_time/2026-11-29-amd-two-nodes  # re-time (root: namespaces and tc; ~20 min)

On one node this CPU's ranks talk over loopback at about 0.8 GB/s, and communication is a few percent of a step, so
the one-node cases (benchmarks/step_time.py) say little about what the model makes of it. Here each rank is a node of
its own: a network namespace each, joined by a veth pair (tests/_nodes.py), the link throttled at both ends by tc's
token bucket (`tbf rate RATE`), so that the gradient reduces and ZeRO-3's gathers take as long as the compute or
longer. The step times then show the volume each stage moves, what accumulation amortises (ZeRO-1 reduces once a
step, ZeRO-2 in every backward) and ZeRO-3's reuse window (a model this small stays gathered from forward into
backward at DeepSpeed's default reuse distance; `zero3_reuse0` sets it to 0, so backward gathers everything again).

--measure runs `--repeats` rounds. Each round probes this machine (2 ranks on one node, as benchmarks/step_time.py
does: the compute, loopback and engine figures), measures the throttled link with gloo from one namespace to the
other (the all-reduce and all-gather bus bandwidth and the latency, as the probe measures a node's ranks: `link`),
and then runs each case once: the `deepspeed` runner in each namespace, `--no_ssh`, one rank a node. A case's figure
is the median over the rounds, as are the profile's and the link's. The prediction is the time model on the median
profile with the link's bus bandwidth as `inter_node_bandwidth`, what `zerokit plan --hardware profile.json --nodes 2
--inter-node-bandwidth ...` uses; the table also prices the tbf rate itself, which is what a user would give.
tests/test_perf_golden.py holds the committed measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests")]

from step_time import (
    MICRO_BATCH,
    MODEL,
    SEQ_LEN,
    THREADS,
    _write_json,
    ds_config,
    load_average,
    median_profile,
    predict,
    probe,
    ranking_summary,
    runner_env,
    worker_spec,
)

from zerokit.launch.runner import free_port
from zerokit.perf import load_profile

DATA = ROOT / "tests" / "data" / "step_time" / "2026-11-29-amd-two-nodes"
NODES = 2
CASES = {
    "zero1": {"stage": 1},
    "zero2": {"stage": 2},
    "zero3": {"stage": 3},
    "zero1_accum4": {"stage": 1, "accumulation": 4},
    "zero2_accum4": {"stage": 2, "accumulation": 4},
    "zero3_reuse0": {"stage": 3, "reuse_distance": 0},
}
TC_BITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
"""tc's rate units (SI, in bits a second)."""
LINK_ELEMENTS = 1 << 20
"""fp32 elements of the link's all-reduce (4 MB: 0.16 s at 200 Mbit/s)."""


def tc_rate(rate: str) -> float:
    """Bytes/s of a tc rate such as `200mbit`."""
    unit = next((u for u in TC_BITS if rate.endswith(u)), None)
    if unit is None:
        raise SystemExit(f"--rate {rate!r}: give it in tc's units, e.g. 200mbit or 1gbit")
    return float(rate[:-len(unit)]) * TC_BITS[unit] / 8


def tbf(nodes, rate: str) -> None:
    """Throttle the veth pair at both ends: each end's egress through a token bucket of `rate` (tc's own units)."""
    for node in range(NODES):
        subprocess.run(nodes.argv(node, ["tc", "qdisc", "replace", "dev", nodes.ifname, "root", "tbf", "rate", rate,
                                         "burst", "256kb", "latency", "50ms"]), check=True, timeout=30)


LINK_WORKER = """
import json, os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
w, n, reps = dist.get_world_size(), int(sys.argv[1]), 5
x, one = torch.ones(n), torch.ones(1)
parts, mine = [torch.empty(n // w) for _ in range(w)], torch.ones(n // w)

def seconds(fn, count):
    dist.barrier(); fn(); dist.barrier()
    start = time.perf_counter()
    for _ in range(count):
        fn()
    return (time.perf_counter() - start) / count

reduce_bus = 2 * (w - 1) / w * n * 4 / seconds(lambda: dist.all_reduce(x), reps)
gather_bus = (w - 1) / w * n * 4 / seconds(lambda: dist.all_gather(parts, mine), reps)
latency = seconds(lambda: dist.all_reduce(one), 50)
if dist.get_rank() == 0:
    json.dump({"all_reduce_bus_bandwidth": reduce_bus, "all_gather_bus_bandwidth": gather_bus,
               "bus_bandwidth": (reduce_bus + gather_bus) / 2, "latency_s": latency}, open(sys.argv[2], "w"))
dist.barrier()
dist.destroy_process_group()
# the process group is gone; leave without C++ static destructors, which on the CPU accelerator occasionally
# abort a rank at exit ("terminate called without an active exception"), as examples/train_hf.py does
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""
"""The link's collectives between the two namespaces, timed as `zerokit.perf.probe`'s `collectives` times a node's
ranks (bus bandwidth: what each rank sends, over the time)."""


def environment(nodes) -> dict[str, str]:
    """`runner_env`, gloo on the veth pair's interface (each namespace has it under the same name)."""
    return {**runner_env(), "GLOO_SOCKET_IFNAME": nodes.ifname}


def run_nodes(nodes, commands: list[list[str]], envs: list[dict[str, str]], tmp: str,
              timeout: float) -> tuple[bool, list[str]]:
    """Run one command in each namespace at once: (whether every node exited 0, each node's output). Each node
    writes to a file of its own: two pipes read one after the other could fill and stall the node not being read."""
    paths = [Path(tmp) / f"node{node}.log" for node in range(len(commands))]
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(path, "w", encoding="utf-8")) for path in paths]
        procs = [subprocess.Popen(nodes.argv(node, cmd), env=env, stdout=f, stderr=subprocess.STDOUT)
                 for node, (cmd, env, f) in enumerate(zip(commands, envs, files))]
        for proc in procs:
            proc.wait(timeout=timeout)
    return all(p.returncode == 0 for p in procs), [path.read_text(errors="replace") for path in paths]


def measure_link(nodes) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="zerokit-link-") as tmp:
        out = Path(tmp) / "link.json"
        envs = [{**environment(nodes), "MASTER_ADDR": nodes.addresses[0], "MASTER_PORT": str(port),
                 "RANK": str(node), "WORLD_SIZE": str(NODES)} for node in range(NODES)]
        ok, logs = run_nodes(nodes, [[sys.executable, "-c", LINK_WORKER, str(LINK_ELEMENTS), str(out)]] * NODES,
                             envs, tmp, 600)
        if not ok or not out.exists():
            raise SystemExit("the link measurement failed:\n" + "\n".join(log[-1500:] for log in logs))
        return json.loads(out.read_text())


def time_case(nodes, name: str, case: dict, warmup: int, steps: int) -> dict:
    """One run of a case: the deepspeed runner in each namespace (`--no_ssh`, one rank a node), node 0's rank 0
    writing each step's time."""
    with tempfile.TemporaryDirectory(prefix="zerokit-nodes-") as tmp:
        case_file, out, hostfile = Path(tmp) / "case.json", Path(tmp) / "times.json", Path(tmp) / "hostfile"
        case_file.write_text(json.dumps(worker_spec(case, warmup, steps)))
        hostfile.write_text("".join(f"{host} slots=1\n" for host in nodes.hostnames))
        before, port = load_average(), free_port()
        commands = [["deepspeed", "--hostfile", str(hostfile), "--no_ssh", "--node_rank", str(node), "--master_addr",
                     nodes.addresses[0], "--master_port", str(port),
                     str(ROOT / "benchmarks" / "_step_time_worker.py"), "--case", str(case_file), "--out", str(out)]
                    for node in range(NODES)]
        ok, logs = run_nodes(nodes, commands, [environment(nodes)] * NODES, tmp, 1800)
        if not ok or not out.exists():
            tail = "\n".join("\n".join(log.strip().splitlines()[-10:]) for log in logs)
            raise SystemExit(f"{name}: the training failed:\n{tail}")
        times = json.loads(out.read_text())["step_times_s"][warmup:]
    return {"median_s": statistics.median(times), "steps_s": times, "load_before": before,
            "load_after": load_average()}


def measure(rate: str, repeats: int, warmup: int, steps: int, cases: list[str], data: Path) -> None:
    """Round-robin, as benchmarks/step_time.py measures: a probe, the link, then every case once, each round; the
    files are rewritten after every round."""
    from _nodes import Namespaces, namespaces_unavailable

    why = namespaces_unavailable()
    if why:
        raise SystemExit(f"two network namespaces cannot be made here ({why}): run as root with iproute2")
    nodes = Namespaces()
    try:
        tbf(nodes, rate)
        profiles, links, runs = [], [], {name: [] for name in cases}
        for r in range(repeats):
            profiles.append(probe())
            links.append(measure_link(nodes))
            print(f"round {r + 1}/{repeats} link: bus {links[-1]['bus_bandwidth'] / 1e6:.1f} MB/s, latency "
                  f"{links[-1]['latency_s'] * 1e3:.2f} ms", flush=True)
            for name in cases:
                run = time_case(nodes, name, CASES[name], warmup, steps)
                runs[name].append(run)
                print(f"round {r + 1}/{repeats} {name}: median {run['median_s']:.3f} s/step (load "
                      f"{run['load_before']:.1f} -> {run['load_after']:.1f})", flush=True)
            write(data, rate, profiles, links, runs, warmup, steps)
    finally:
        nodes.close()


def write(data: Path, rate: str, profiles: list[dict], links: list[dict], runs: dict[str, list[dict]], warmup: int,
          steps: int) -> None:
    _write_json(data / "profile.json", median_profile(profiles))
    link = {k: statistics.median(x[k] for x in links) for k in links[0]}
    _write_json(data / "measured.json", {
        "command": "python benchmarks/step_time_nodes.py --measure", "date": time.strftime("%Y-%m-%d %H:%M"),
        "model": MODEL, "seq_len": SEQ_LEN, "micro_batch": MICRO_BATCH, "ranks": NODES, "nodes": NODES,
        "gpus_per_node": 1, "environment": THREADS, "tbf_rate": rate, "link": {**link, "rounds": links},
        "warmup_steps": warmup, "timed_steps": steps, "repeats": len(profiles), "cpu_count": os.cpu_count(),
        "cases": {name: {"setup": CASES[name], "ds_config": ds_config(CASES[name]),
                         "median_s": statistics.median(r["median_s"] for r in case_runs), "runs": case_runs}
                  for name, case_runs in runs.items()}})


def machine(data: Path):
    """(the median profile with the link's measured bus bandwidth between the nodes, the measurement)."""
    measured = json.loads((data / "measured.json").read_text())
    perf = load_profile(str(data / "profile.json"))
    return replace(perf, inter_node_bandwidth=measured["link"]["bus_bandwidth"]), measured


def report(data: Path) -> int:
    perf, measured = machine(data)
    at_rate = replace(perf, inter_node_bandwidth=tc_rate(measured["tbf_rate"]))
    link = measured["link"]
    print(f"Real 2-node DeepSpeed trainings, one rank a node, between two network namespaces on this CPU "
          f"({measured['date']}; llama {MODEL['hidden_size']} x {MODEL['num_hidden_layers']} layers, seq {SEQ_LEN}, "
          f"micro-batch {MICRO_BATCH}, bf16), the link throttled to {measured['tbf_rate']} (tc tbf): gloo measured "
          f"{link['bus_bandwidth'] / 1e6:.1f} MB/s bus bandwidth, {link['latency_s'] * 1e3:.2f} ms latency; against "
          f"the time model with the probe profile ({perf.name}) and the link's bus bandwidth between the nodes")
    print(f"{'case':14} {'measured':>9} {'predicted':>9} {'error':>7}  {'compute':>8} {'comm':>7} {'optim':>7} "
          f"{'overhead':>8}  {'at tbf rate':>11} {'error':>7}  runs (s)")
    rows, worst, ok = [], 0.0, True
    for name, case in CASES.items():
        if name not in measured["cases"]:
            continue
        got, case_runs = measured["cases"][name]["median_s"], measured["cases"][name]["runs"]
        t, r = predict(case, perf, nodes=NODES), predict(case, at_rate, nodes=NODES)
        err = (t.step_time_s - got) / got
        worst = max(worst, abs(err))
        ok &= abs(err) <= 0.20
        rows.append((name, got, t.step_time_s, [x["median_s"] for x in case_runs]))
        print(f"{name:14} {got:8.3f}s {t.step_time_s:8.3f}s {err:+7.1%}  {t.compute_s:7.3f}s "
              f"{t.exposed_communication_s:6.3f}s {t.optimizer_s:6.3f}s {t.overhead_s:7.3f}s  "
              f"{r.step_time_s:10.3f}s {(r.step_time_s - got) / got:+7.1%}  "
              + "/".join(f"{x['median_s']:.2f}" for x in case_runs))
    flips = ranking_summary(rows, worst)
    return 0 if ok and not flips else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="re-probe, re-measure the link and re-time the cases")
    ap.add_argument("--rate", default="200mbit", help="the link's tbf rate, in tc's units (default 200mbit)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--data", type=Path, default=DATA, help=f"the measurement's folder (default {DATA})")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}")
    if args.measure:
        tc_rate(args.rate)
        measure(args.rate, args.repeats, args.warmup, args.steps, cases, args.data)
    return report(args.data)


if __name__ == "__main__":
    sys.exit(main())
