"""Where a call of fg.compile(model) spends its time beside the plans' kernels: one training step of the
eager loop split into phases, on the plain model and on the compiled one, with the compiled call's
layers peeled off one at a time.

    python benchmarks/profile_compile_model.py [--case mlp|transformer] [--profile]

One thread; every figure is the best of 5 repeats of the mean process CPU time over 20 calls (the
machine may be shared), in microseconds:

- `call`: `cmodel(x)` under grad; `autograd_plan_run`: the AutogradPlan's run that the call makes
  (the forward plan and the node); `forward_plan_run`: the forward plan alone. call -
  autograd_plan_run is the Python frame (signature, identity check, cache, rebuilding the outputs);
  autograd_plan_run - forward_plan_run is the node and the saved tensors.
- `backward`: `loss.backward()` after the compiled call; `backward_plan_run`: the backward plan alone
  on the same inputs. backward - backward_plan_run is the engine, the loss's backward and the
  gradients' hand-over.
- the eager loop's `forward` and `backward` for comparison.

--profile adds cProfile's top entries of 300 compiled calls. Works on older builds too (PYTHONPATH).
"""
import argparse
import cProfile
import pstats
import time

import flowgrad as fg
import flowgrad.nn.functional as F
from bench_compile import flowgrad_model
from bench_compile_model import data


def best(fn, calls=20, repeat=5):
    fn()
    times = []
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(calls):
            fn()
        times.append((time.process_time() - start) / calls)
    return min(times) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=["mlp", "transformer"], default="mlp")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    fg.set_num_threads(1)
    x, y = data(args.case, 64 if args.case == "mlp" else 16)
    eager, model = flowgrad_model(args.case), flowgrad_model(args.case)
    compiled = fg.compile(model)
    for _ in range(2):
        F.cross_entropy(compiled(x), y).backward()
    ((_, plan),) = compiled.plans()
    wrt = [p for p in model.parameters() if p.requires_grad]
    out = plan.forward.run([x])
    grad_in = [fg.ones_like(out[0])] + list(out[1:])

    def backward_of(forward):
        loss = F.cross_entropy(forward(x), y)
        return lambda: loss.backward(retain_graph=True)

    rows = {
        "call": best(lambda: compiled(x)),
        "autograd_plan_run": best(lambda: plan.run([x], wrt)),
        "forward_plan_run": best(lambda: plan.forward.run([x])),
        "backward": best(backward_of(compiled)),
        "backward_plan_run": best(lambda: plan.backward.run(grad_in)),
        "eager_forward": best(lambda: eager(x)),
        "eager_backward": best(backward_of(eager)),
    }
    for name, us in rows.items():
        print(f"{name:20s} {us:10.1f} us")
    print(f"python frame (call - autograd_plan_run)        {rows['call'] - rows['autograd_plan_run']:8.1f} us")
    print(f"node + saved (autograd_plan_run - forward_plan) {rows['autograd_plan_run'] - rows['forward_plan_run']:8.1f} us")
    print(f"engine + hand-over (backward - backward_plan)   {rows['backward'] - rows['backward_plan_run']:8.1f} us")
    print(f"compiled - eager, forward + backward            "
          f"{rows['call'] + rows['backward'] - rows['eager_forward'] - rows['eager_backward']:8.1f} us")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(300):
            compiled(x)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    main()
