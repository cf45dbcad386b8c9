#!/usr/bin/env python3
"""Measure whole-model solo and co-located latencies of the paper's seven models on a real
NVIDIA GPU with PyTorch, to check the `sim:` device model against hardware.

This is not part of the TypeScript runtime (onnxruntime-node's CUDA provider cannot be
installed offline); it runs on the device machine lent to some sessions, where PyTorch,
torchvision and transformers are installed. Models are built with random weights (no
download): torchvision resnet50/101/152, inception_v3, vgg16/19, and transformers' BERT-base
(`BertConfig()` defaults: 12 layers, hidden 768). Latency does not depend on weight values.

Method
------
* Every (model, batch) forward pass is captured once as a CUDA graph, so launches cost a few
  microseconds and what we time is the GPU, not Python. Solo: replay on one stream.
* A co-located group: each member's graph is replayed on its own CUDA stream. All replays are
  enqueued behind a ~2 ms GPU sleep on a gate stream, so they start together; group latency =
  gate event -> last member's end event (CUDA events, ms).
* Random overlap (uncontrolled, as MPS / several streams give): member B starts at a random
  offset in [0, solo latency of A) after A; we record A's latency, to see how far it moves.
* FP32 with PyTorch defaults (TF32 allowed for cuDNN convolutions; matmul precision printed).

Outputs (in OUT, default `$OUT` or `./out/h200`):
* `h200-group-latency.csv` in the format of `reference/a100-group-latency.csv`
  (model_a,start_a,end_a,batch_a,seq_len_a,model_b,...,latency_ms: median of the reps),
  with operator counts of our partition (resnet50 18, ...), so
  `abacus simulate calibrate --device sim:h200:graph --reference FILE` can compare.
* `h200-latency-samples.csv`: every rep (kind, members, latency) for p99 and spread.
* `h200-random-overlap.csv`: per pair, A's latency under a random-offset B vs A solo.
* `h200-multiway.csv`: 3- and 4-way groups of the paper's sets.
* `env.json`: GPU, driver, torch versions, settings.
"""
import csv
import itertools
import json
import os
import random
import statistics
import sys
import time
import traceback

import torch

OUT = os.environ.get("OUT") or os.path.join(os.getcwd(), "out", "h200")
os.makedirs(OUT, exist_ok=True)
QUICK = "--quick" in sys.argv
REPS = 8 if QUICK else 25
RANDOM_REPS = 20 if QUICK else 120
MODELS = ["resnet50", "resnet101", "resnet152", "inception_v3", "vgg16", "vgg19", "bert"]
# Operators of our partition (src/model/zoo, `abacus models --json`), for the reference format.
OPERATORS = {"resnet50": 18, "resnet101": 35, "resnet152": 52, "inception_v3": 14, "vgg16": 19, "vgg19": 22, "bert": 12}
SOLO_BATCHES = [1, 4, 16] if QUICK else [1, 2, 4, 8, 16, 32]
PAIR_BATCHES = [1, 4, 16]
SEQ_LEN = 32  # the A100 reference's BERT rows use 32
MULTIWAY = [
    ["resnet50", "vgg16", "bert"],
    ["resnet101", "inception_v3", "vgg19"],
    ["resnet50", "resnet152", "vgg16", "bert"],
    ["resnet101", "inception_v3", "vgg19", "bert"],
]
LOG = open(os.path.join(OUT, "log.txt"), "w")


def log(*args):
    line = " ".join(str(a) for a in args)
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


dev = torch.device("cuda")
torch.backends.cudnn.benchmark = True


def build(name):
    if name == "bert":
        from transformers import BertConfig, BertModel

        return BertModel(BertConfig()).eval().to(dev)
    import torchvision.models as tvm

    if name == "inception_v3":
        return tvm.inception_v3(weights=None, aux_logits=False, init_weights=False).eval().to(dev)
    return getattr(tvm, name)(weights=None).eval().to(dev)


def make_input(name, batch):
    if name == "bert":
        return torch.randint(0, 30000, (batch, SEQ_LEN), device=dev)
    size = 299 if name == "inception_v3" else 224
    return torch.randn(batch, 3, size, size, device=dev)


class Captured:
    """A (model, batch) forward pass as a CUDA graph (or eager fallback)."""

    def __init__(self, name, model, batch):
        self.name, self.batch = name, batch
        self.x = make_input(name, batch)
        self.model = model
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                model(self.x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = None
        try:
            g = torch.cuda.CUDAGraph()
            # Own capture stream per graph: cuBLAS keeps one workspace per (handle, stream),
            # and graphs captured on one shared stream would share it when replayed together.
            with torch.no_grad(), torch.cuda.graph(g, stream=torch.cuda.Stream()):
                self.out = model(self.x)
            self.graph = g
        except Exception as err:  # noqa: BLE001 - record and fall back
            log(f"  graph capture failed for {name} b{batch}: {err!r}; eager")
            torch.cuda.synchronize()

    @property
    def mode(self):
        return "graph" if self.graph is not None else "eager"

    def launch(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            with torch.no_grad():
                self.model(self.x)


STREAMS = [torch.cuda.Stream() for _ in range(4)]
GATE = torch.cuda.Stream()
GATE_CYCLES = int(4e6)  # ~2 ms at ~2 GHz: every launch is enqueued before the gate opens


def run_group(members, offsets_ms=None, clock_ghz=1.98):
    """Start every member together on its own stream; return (group ms, [member ms])."""
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(GATE):
        torch.cuda._sleep(GATE_CYCLES)
        start.record(GATE)
    begins, ends = [], []
    for i, m in enumerate(members):
        s = STREAMS[i]
        s.wait_event(start)
        with torch.cuda.stream(s):
            b = torch.cuda.Event(enable_timing=True)
            if offsets_ms is not None and offsets_ms[i] > 0:
                torch.cuda._sleep(int(offsets_ms[i] * clock_ghz * 1e6))
            b.record(s)
            m.launch()
            e = torch.cuda.Event(enable_timing=True)
            e.record(s)
        begins.append(b)
        ends.append(e)
    torch.cuda.synchronize()
    member_ms = [b.elapsed_time(e) for b, e in zip(begins, ends)]
    group_ms = max(start.elapsed_time(e) for e in ends)
    return group_ms, member_ms


def measure(members, reps):
    for _ in range(2):
        run_group(members)
    return [run_group(members)[0] for _ in range(reps)]


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def main():
    t0 = time.time()
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_precision": torch.get_float32_matmul_precision(),
        "reps": REPS,
        "random_reps": RANDOM_REPS,
        "quick": QUICK,
        "seq_len": SEQ_LEN,
    }
    try:
        import torchvision
        import transformers

        env["torchvision"] = torchvision.__version__
        env["transformers"] = transformers.__version__
    except Exception as err:  # noqa: BLE001
        env["import_error"] = repr(err)
    log(json.dumps(env))
    with open(os.path.join(OUT, "env.json"), "w") as f:
        json.dump(env, f, indent=1)

    models = {}
    captured = {}
    for name in MODELS:
        try:
            models[name] = build(name)
            for b in sorted(set(SOLO_BATCHES) | set(PAIR_BATCHES)):
                captured[(name, b)] = Captured(name, models[name], b)
            log(f"built {name} ({time.time() - t0:.0f} s)")
        except Exception:  # noqa: BLE001
            log(f"FAILED to build {name}:\n{traceback.format_exc()}")

    ref = open(os.path.join(OUT, "h200-group-latency.csv"), "w", newline="")
    refw = csv.writer(ref)
    refw.writerow(["model_a", "start_a", "end_a", "batch_a", "seq_len_a", "model_b", "start_b", "end_b", "batch_b", "seq_len_b", "latency_ms"])
    samples = open(os.path.join(OUT, "h200-latency-samples.csv"), "w", newline="")
    sw = csv.writer(samples)
    sw.writerow(["kind", "members", "mode", "n", "p50_ms", "p99_ms", "min_ms", "max_ms", "mean_ms", "stdev_ms"])

    def seq(name):
        return SEQ_LEN if name == "bert" else 0

    def write_samples(kind, members, xs):
        sw.writerow([kind, "+".join(f"{m.name}:b{m.batch}" for m in members), "/".join(m.mode for m in members), len(xs),
                     f"{statistics.median(xs):.4f}", f"{pct(xs, 99):.4f}", f"{min(xs):.4f}", f"{max(xs):.4f}",
                     f"{statistics.mean(xs):.4f}", f"{statistics.pstdev(xs):.4f}"])
        samples.flush()

    # Phase 1: solo.
    solo = {}
    for (name, b), c in sorted(captured.items()):
        if b not in SOLO_BATCHES:
            continue
        xs = measure([c], REPS)
        solo[(name, b)] = statistics.median(xs)
        refw.writerow([name, 0, OPERATORS[name], b, seq(name), "", "", "", "", "", f"{solo[(name, b)]:.3f}"])
        write_samples("solo", [c], xs)
    ref.flush()
    log(f"solo done ({time.time() - t0:.0f} s)")

    rnd = random.Random(7)
    rf = open(os.path.join(OUT, "h200-random-overlap.csv"), "w", newline="")
    rw = csv.writer(rf)
    rw.writerow(["model_a", "model_b", "batch", "solo_a_ms", "solo_b_ms", "n", "a_p50_ms", "a_p99_ms", "a_max_ms", "b_p50_ms", "b_p99_ms", "a_p99_over_solo", "b_p99_over_solo"])
    mf = open(os.path.join(OUT, "h200-multiway.csv"), "w", newline="")
    mw = csv.writer(mf)
    mw.writerow(["members", "batch", "group_p50_ms", "group_p99_ms", "sum_solo_ms", "max_solo_ms", "group_over_sum"])

    # BERT's groups run last: a fault there (if any) cannot cost the CNN results.
    for with_bert in (False, True):
        # Phase 2: pairs of distinct models, same batch (as the A100 reference).
        for b in PAIR_BATCHES:
            for a, c in itertools.combinations(MODELS, 2):
                if ("bert" in (a, c)) != with_bert or (a, b) not in captured or (c, b) not in captured:
                    continue
                xs = measure([captured[(a, b)], captured[(c, b)]], REPS)
                refw.writerow([a, 0, OPERATORS[a], b, seq(a), c, 0, OPERATORS[c], b, seq(c), f"{statistics.median(xs):.3f}"])
                write_samples("pair", [captured[(a, b)], captured[(c, b)]], xs)
            ref.flush()
            log(f"pairs b{b} bert={with_bert} done ({time.time() - t0:.0f} s)")

        # Phase 3: random overlap at batch 4 (uncontrolled: B starts at a random point of A's run).
        for a, c in itertools.permutations(MODELS, 2):
            if ("bert" in (a, c)) != with_bert:
                continue
            sa, sc = solo.get((a, 4)), solo.get((c, 4))
            if sa is None or sc is None:
                continue
            amem, bmem = [], []
            for _ in range(RANDOM_REPS):
                off = rnd.uniform(0, sa)
                _, (ma, mb) = run_group([captured[(a, 4)], captured[(c, 4)]], offsets_ms=[0.0, off])
                amem.append(ma)
                bmem.append(mb)
            rw.writerow([a, c, 4, f"{sa:.3f}", f"{sc:.3f}", RANDOM_REPS, f"{statistics.median(amem):.3f}", f"{pct(amem, 99):.3f}", f"{max(amem):.3f}",
                         f"{statistics.median(bmem):.3f}", f"{pct(bmem, 99):.3f}", f"{pct(amem, 99) / sa:.3f}", f"{pct(bmem, 99) / sc:.3f}"])
            rf.flush()
        log(f"random overlap bert={with_bert} done ({time.time() - t0:.0f} s)")

        # Phase 4: 3- and 4-way groups at batch 4.
        for names in MULTIWAY:
            if ("bert" in names) != with_bert or any((n, 4) not in solo for n in names):
                continue
            xs = measure([captured[(n, 4)] for n in names], REPS)
            total = sum(solo[(n, 4)] for n in names)
            mw.writerow(["+".join(names), 4, f"{statistics.median(xs):.3f}", f"{pct(xs, 99):.3f}", f"{total:.3f}", f"{max(solo[(n, 4)] for n in names):.3f}", f"{statistics.median(xs) / total:.3f}"])
            mf.flush()
            write_samples("multiway", [captured[(n, 4)] for n in names], xs)
        log(f"multiway bert={with_bert} done ({time.time() - t0:.0f} s)")
    log(f"all done ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
