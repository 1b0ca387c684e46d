"""Collectives against NumPy on every rank: each rank rebuilds all ranks' inputs from seeds."""
import numpy as np

import flowgrad as fg
import flowgrad.distributed as dist

dist.init("mpi")
rank, size = dist.rank(), dist.world_size()
SHAPES = [(45, 65), (7,), (1, 5), (3, 1, 4), (0, 3), ()]


def data(r, shape, dtype):
    g = np.random.default_rng(100 + r)
    return (g.integers(-50, 50, size=shape) if np.issubdtype(dtype, np.integer) else g.standard_normal(shape)).astype(dtype)


def check(got, want, what):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


for shape in SHAPES:
    for dtype in (np.float32, np.float64, np.int64, np.int32):
        every = np.stack([data(r, shape, dtype) for r in range(size)])
        for op, ref in (("sum", every.sum(0)), ("max", every.max(0)), ("min", every.min(0)), ("avg", every.mean(0))):
            if op == "avg" and np.issubdtype(dtype, np.integer):
                continue
            t = fg.tensor(data(rank, shape, dtype))
            dist.all_reduce(t, op=op)
            check(t.numpy(), ref.astype(dtype), f"all_reduce {op} {shape} {dtype}")

# the narrow integers (issue 18, F5): each has its own MPI type; values small enough that a sum
# over three ranks stays in range, so NumPy's sums are exact
for dtype, low, high in ((np.int8, -40, 40), (np.uint8, 0, 80), (np.int16, -9000, 9000)):
    narrow = [np.random.default_rng(200 + r).integers(low, high, size=(5, 7)).astype(dtype) for r in range(size)]
    for op, ref in (("sum", np.sum(narrow, 0)), ("max", np.max(narrow, 0)), ("min", np.min(narrow, 0))):
        t = fg.tensor(narrow[rank])
        dist.all_reduce(t, op=op)
        assert t.dtype == fg.tensor(narrow[0]).dtype
        np.testing.assert_array_equal(t.numpy(), ref.astype(dtype), err_msg=f"all_reduce {op} {dtype}")
    out = fg.tensor(np.zeros((5 * size, 7), dtype))
    dist.all_gather(out, fg.tensor(narrow[rank]))
    np.testing.assert_array_equal(out.numpy(), np.concatenate(narrow), err_msg=f"all_gather {dtype}")
    t = fg.tensor(narrow[rank])
    dist.broadcast(t, src=size - 1)
    np.testing.assert_array_equal(t.numpy(), narrow[size - 1], err_msg=f"broadcast {dtype}")

# non-contiguous input: the result lands in the strided view
base = data(rank, (6, 5), np.float32)
t = fg.tensor(np.ascontiguousarray(base.T)).transpose(0, 1)
assert not t.is_contiguous()
dist.all_reduce(t)
check(t.numpy(), sum(data(r, (6, 5), np.float32) for r in range(size)), "all_reduce strided")
# a strided slice (not a permutation of its storage): only its elements change, averaged
whole = fg.tensor(data(rank, (6, 5), np.float32))
dist.all_reduce(whole[1::2, ::2], op="avg")
want = data(rank, (6, 5), np.float32)
want[1::2, ::2] = sum(data(r, (6, 5), np.float32) for r in range(size))[1::2, ::2] / size
check(whole.numpy(), want, "all_reduce avg of a strided slice")

# broadcast from every root, float16 through float32 staging
for root in range(size):
    t = fg.tensor(data(rank, (3, 7), np.float32)).to(fg.float16)
    dist.broadcast(t, src=root)
    check(t.to(fg.float32).numpy(), data(root, (3, 7), np.float32).astype(np.float16).astype(np.float32), "broadcast")

# all_gather and reduce_scatter
mine = fg.tensor(data(rank, (2, 3), np.float64))
out = fg.zeros(2 * size, 3, dtype=fg.float64)
dist.all_gather(out, mine)
check(out.numpy(), np.concatenate([data(r, (2, 3), np.float64) for r in range(size)]), "all_gather")
full = fg.tensor(data(rank, (size * 4, 3), np.float32))
part = fg.zeros(4, 3)
dist.reduce_scatter(part, full, op="sum")
check(part.numpy(), sum(data(r, (size * 4, 3), np.float32) for r in range(size))[rank * 4:(rank + 1) * 4], "reduce_scatter")
dist.reduce_scatter(part, full, op="avg")
check(part.numpy(), sum(data(r, (size * 4, 3), np.float32) for r in range(size))[rank * 4:(rank + 1) * 4] / size, "reduce_scatter avg")

# async handles: issue several, then wait
ts = [fg.tensor(data(rank, (1000,), np.float32) * (k + 1)) for k in range(4)]
works = [dist.all_reduce(t, async_op=True) for t in ts]
assert all(isinstance(w, dist.Work) for w in works)
for k, (t, w) in enumerate(zip(ts, works)):
    w.wait()
    check(t.numpy(), sum(data(r, (1000,), np.float32) for r in range(size)) * (k + 1), "async all_reduce")
dist.barrier()
dist.barrier(async_op=True).wait()

# errors name the op, the shapes and what was expected
def raises(kind, words, fn):
    try:
        fn()
    except kind as e:
        assert all(w in str(e) for w in words), str(e)
    else:
        raise AssertionError(f"expected {kind.__name__}")


raises(fg.ShapeError, ["all_gather", "world_size"], lambda: dist.all_gather(fg.zeros(3), fg.zeros(2)))
raises(fg.ShapeError, ["reduce_scatter"], lambda: dist.reduce_scatter(fg.zeros(3), fg.zeros(size * 3 + 1)))
raises(fg.DTypeError, ["all_reduce", "bool"], lambda: dist.all_reduce(fg.zeros(2, dtype=fg.bool)))
raises(fg.DTypeError, ["avg", "floating"], lambda: dist.all_reduce(fg.zeros(2, dtype=fg.int64), op="avg"))
raises(fg.InvalidArgumentError, ["unknown reduce op 'prod'"], lambda: dist.all_reduce(fg.zeros(2), op="prod"))
raises(fg.InvalidArgumentError, ["root", str(size)], lambda: dist.broadcast(fg.zeros(2), src=size))
raises(fg.InvalidArgumentError, ["already initialised"], lambda: dist.init("mpi"))
print(f"rank {rank}/{size} collectives ok")
