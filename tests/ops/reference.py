"""The NumPy reference of every elementwise op of the op table (cpp/flowgrad/base/ops.def).

test_elementwise.py iterates these tables, and fails for an elementwise row of the op table that
has no reference here (or for a reference whose row is gone).
"""
import math

import numpy as np

import flowgrad as fg

erf = np.vectorize(math.erf, otypes=[np.float64])


def erfinv(x):
    from scipy.special import erfinv as scipy_erfinv  # SciPy comes with scikit-learn (the test extra)
    return scipy_erfinv(np.asarray(x, np.float64))


def np_gelu(x):
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def np_gelu_grad(x):
    return 0.5 * (1 + erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


def np_gelu_tanh_grad(x):
    k, a = np.sqrt(2 / np.pi), 0.044715
    t = np.tanh(k * (x + a * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x)


def first_order_grad(fn):
    """fn's gradient as autograd computes it to first order: the fused *_backward kernel."""
    def grad(x, g):
        (dx,) = fg.autograd.grad(fn(x), x, g)
        return dx
    return grad


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


# float ops: name -> (flowgrad function, NumPy reference, input range)
UNARY = {
    "neg": (fg.neg, np.negative, (-2, 2)),
    "abs": (fg.abs, np.abs, (-2, 2)),
    "square": (fg.square, np.square, (-2, 2)),
    "sign": (fg.sign, np.sign, (-2, 2)),
    "relu": (fg.relu, lambda x: np.maximum(x, 0), (-2, 2)),
    "exp": (fg.exp, np.exp, (-2, 2)),
    "log": (fg.log, np.log, (0.1, 3)),
    "sqrt": (fg.sqrt, np.sqrt, (0.1, 3)),
    "rsqrt": (fg.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 3)),
    "sin": (fg.sin, np.sin, (-3, 3)),
    "cos": (fg.cos, np.cos, (-3, 3)),
    "tanh": (fg.tanh, np.tanh, (-3, 3)),
    "erf": (fg.erf, erf, (-2, 2)),
    "log1p": (fg.log1p, np.log1p, (-0.9, 3)),
    "expm1": (fg.expm1, np.expm1, (-3, 3)),
    "erfinv": (fg.erfinv, erfinv, (-0.95, 0.95)),
    "sigmoid": (fg.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-5, 5)),
    "silu": (fg.silu, lambda x: x / (1 + np.exp(-x)), (-5, 5)),
    "softplus": (fg.softplus, lambda x: np.log1p(np.exp(x)), (-5, 5)),
    "gelu": (fg.gelu, np_gelu, (-3, 3)),
    "gelu_tanh": (lambda x: fg.gelu(x, approximate="tanh"), np_gelu_tanh, (-3, 3)),
    "clamp": (lambda x: fg.clamp(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), (-2, 2)),
}

# name -> (flowgrad function, NumPy reference)
BINARY = {
    "add": (fg.add, np.add), "sub": (fg.sub, np.subtract), "mul": (fg.mul, np.multiply),
    "div": (fg.div, np.divide), "pow": (fg.pow, np.power), "maximum": (fg.maximum, np.maximum),
    "minimum": (fg.minimum, np.minimum),
}
COMPARE = {
    "eq": (fg.eq, np.equal), "ne": (fg.ne, np.not_equal), "lt": (fg.lt, np.less),
    "le": (fg.le, np.less_equal), "gt": (fg.gt, np.greater), "ge": (fg.ge, np.greater_equal),
}
# bool and integer operands: name -> (flowgrad function, NumPy reference), unary or binary
BITWISE = {
    "bitwise_and": (fg.bitwise_and, np.bitwise_and), "bitwise_or": (fg.bitwise_or, np.bitwise_or),
    "bitwise_xor": (fg.bitwise_xor, np.bitwise_xor), "bitwise_not": (fg.bitwise_not, np.invert),
}
# gradient kernels: name -> (flowgrad gradient of x given g, NumPy derivative of x times g)
GRADIENT = {
    "gelu_backward": (first_order_grad(fg.gelu), lambda x, g: g * np_gelu_grad(x)),
    "gelu_tanh_backward": (first_order_grad(lambda x: fg.gelu(x, approximate="tanh")), lambda x, g: g * np_gelu_tanh_grad(x)),
    "relu_backward": (first_order_grad(fg.relu), lambda x, g: np.where(x > 0, g, 0.0)),
    "tanh_backward": (first_order_grad(fg.tanh), lambda x, g: g * (1 - np.tanh(x) ** 2)),
    "sigmoid_backward": (first_order_grad(fg.sigmoid), lambda x, g: g * np_sigmoid(x) * (1 - np_sigmoid(x))),
    "silu_backward": (first_order_grad(fg.silu), lambda x, g: g * np_sigmoid(x) * (1 + x * (1 - np_sigmoid(x)))),
}
# name -> (flowgrad function, NumPy reference) of (cond, a, b) and (x,)
OTHER = {
    "where": (fg.where, np.where),
    "cast": (lambda x: x.to(fg.float32), lambda x: x.astype(np.float32)),
}

ALL = {**UNARY, **BINARY, **COMPARE, **BITWISE, **GRADIENT, **OTHER}
