"""Side by side for bench/compare-pytorch.sh and bench/vit-pytorch.sh: for one recipe, trains N
steps with `toy train`, with PyTorch eager and with torch.compile (train_torch.py, or
train_vit_torch.py for `--kind vit`, each in its own process), all at the same thread count on
the same shards and batches, then prints tokens/s or images/s (median of
steady-state steps), the ratios toy/eager and toy/compile, peak RSS, and the loss ratio after
the same steps (mean of the last 10 step losses; must be within 2%). Writes the numbers as
JSON to --out. Exit 1 when the losses disagree by more than 2%.
"""

import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_measured(cmd, env=None):
    """Runs cmd; returns (stdout, peak RSS of that child in MiB, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # RUSAGE_CHILDREN is the largest child so far: when it did not grow, this child was
    # smaller than an earlier one and its own peak is unknown; report the bound.
    return p.stdout, max(after, before) / 1024, wall, after > before


def tail_mean(xs, n=10):
    xs = xs[-n:]
    return sum(xs) / len(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recipe")
    ap.add_argument("--toy", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--data", required=True, help="toy data folder (prepared)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--modes", default="eager,compile",
                    help="PyTorch runs: eager, compile, eager-bf16, compile-bf16 (autocast)")
    ap.add_argument("--precisions", default="f32",
                    help="toy runs: f32, bf16 ([train] precision)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--kind", choices=["lm", "vit"], default="lm",
                    help="vit: an image recipe ([vit]), trained by train_vit_torch.py without augmentation")
    ap.add_argument("--own-init", action="store_true",
                    help="PyTorch draws its own initial weights (same scheme) instead of toy's")
    args = ap.parse_args()

    if args.kind == "vit":
        sets = [f"data.dir={json.dumps(args.data)}", f"train.steps={args.steps}",
                f"train.eval_every={args.steps}", f"train.checkpoint_every={args.steps}",
                "data.crop_pad=0", "data.flip=false"] + args.set
        trainer, unit = "train_vit_torch.py", "images/s"
    else:
        sets = [f"data.dir={json.dumps(args.data)}", f"train.steps={args.steps}",
                f"eval.interval={args.steps}", f"checkpoint.interval={args.steps}"] + args.set
        trainer, unit = "train_torch.py", "tok/s"
    results = {}

    # toy first: the smallest peak RSS, so RUSAGE_CHILDREN gives its own.
    for prec in args.precisions.split(","):
        who = "toy" if prec == "f32" else f"toy-{prec}"
        runs_dir = args.runs_dir if prec == "f32" else f"{args.runs_dir}-{prec}"
        cmd = [args.toy, "-t", str(args.threads), "train", args.recipe, "--runs-dir", runs_dir,
               "--checkpoint-start", "--set", f'train.precision="{prec}"']
        for s in sets:
            cmd += ["--set", s]
        out, rss, wall, own = run_measured(cmd)
        runs = sorted(glob.glob(os.path.join(runs_dir, "*")), key=os.path.getmtime)
        events = [json.loads(l) for l in open(os.path.join(runs[-1], "events.jsonl"))]
        steps = [e for e in events if e["type"] == "step"]
        results[who] = {
            "tok_s": statistics.median([e["tok_s"] for e in steps[args.warmup_steps:]] or [0]),
            "losses": [e["loss"] for e in steps],
            "peak_rss_mib": rss,
            "wall_s": wall,
            "run": runs[-1],
        }
    run = results["toy"]["run"]

    for mode in args.modes.split(","):
        cmd = [args.python, os.path.join(HERE, trainer), args.recipe, "--mode", mode.split("-")[0],
               "--steps", str(args.steps), "--threads", str(args.threads),
               "--warmup-steps", str(args.warmup_steps)]
        for s in sets:
            cmd += ["--set", s]
        if mode.endswith("-bf16"):
            cmd.append("--bf16")
        if not args.own_init:
            cmd += ["--init-from", os.path.join(run, "ckpt-000000.gguf")]
        # OpenMP's default active spin-waiting makes PyTorch ~20x slower at 2 threads when other
        # processes share the cores (measured here: 1.9k vs 28k tok/s on tiny); passive waiting
        # is robust. OMP_WAIT_POLICY=active in the environment keeps the default on a quiet box.
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
                   OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
        out, _, wall, _ = run_measured(cmd, env)
        r = json.loads(out.strip().splitlines()[-1])
        r["wall_s"] = wall
        results[f"torch-{mode}"] = r

    name = os.path.splitext(os.path.basename(args.recipe))[0]
    toy = results["toy"]
    lt = tail_mean(toy["losses"])
    load = os.getloadavg()[0]
    init = "own init" if args.own_init else "toy's init"
    print(f"\n== {name}: {args.steps} steps, {args.threads} threads, {init}, load average {load:.1f} "
          f"({' '.join(args.set) or 'recipe as is'}) ==")
    print("toy/x: the fastest toy run over x (for toy's own rows: x over toy f32); "
          "loss ratio: toy f32 over x")
    print(f"{'':16}{unit:>10}{'toy/x':>8}{'peak RSS MiB':>14}{'loss@end':>10}{'toy/x loss':>12}")
    ok = True
    for who, r in results.items():
        lx = tail_mean(r["losses"])
        best = results.get("toy-bf16", toy)
        speed = best["tok_s"] / r["tok_s"] if not who.startswith("toy") else r["tok_s"] / toy["tok_s"]
        lr = lt / lx
        if who != "toy" and abs(lr - 1) > 0.02:
            ok = False
        print(f"{who:16}{r['tok_s']:>10.0f}{speed:>8.2f}{r['peak_rss_mib']:>14.1f}{lx:>10.4f}{lr:>12.4f}")
    for who in [w for w in results if w.endswith("-bf16") and w.startswith("torch")]:
        if "toy-bf16" in results:
            r = tail_mean(results["toy-bf16"]["losses"]) / tail_mean(results[who]["losses"])
            ok = ok and abs(r - 1) <= 0.02
            print(f"toy-bf16 / {who} loss: {r:.4f}")
    print("losses agree within 2%" if ok else "LOSSES DIFFER BY MORE THAN 2%")
    results["summary"] = {"recipe": name, "steps": args.steps, "threads": args.threads,
                          "init": "own" if args.own_init else "toy's",
                          "load_average": load,
                          "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "passive"),
                          "loss_within_2pct": ok}
    with open(args.out, "w") as f:
        json.dump(results, f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
