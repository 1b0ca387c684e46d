"""fg.einsum: Einstein summation composed from flowgrad's ops (sum, permute, expand, reshape and
one batched matmul per pair of operands), so it is differentiable, traces into compiled plans and
runs on every device those ops run on."""
import string

from . import _core
from ._composite import diagonal_of_last_two

__all__ = ["einsum"]

_LETTERS = set(string.ascii_letters)


def _fail(kind, message):
    raise kind(f"einsum: {message}")


def _terms(equation, count):
    """([labels per operand], output labels or None): letters, with '...' as one '.' token."""
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a str, got {type(equation).__name__}")
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    inputs = lhs.split(",")
    if len(inputs) != count:
        _fail(_core.InvalidArgumentError, f"'{equation}' names {len(inputs)} operands, got {count} tensors")

    def parse(term, where):
        if term.count("...") > 1 or term.replace("...", "").count("."):
            _fail(_core.InvalidArgumentError, f"{where} '{term}' of '{equation}' has a stray '.' (one '...' at most)")
        labels = list(term.replace("...", "."))
        bad = [c for c in labels if c != "." and c not in _LETTERS]
        if bad:
            _fail(_core.InvalidArgumentError, f"{where} '{term}' of '{equation}' has '{bad[0]}': subscripts are letters")
        return labels

    terms = [parse(t, f"operand {i}'s subscripts") for i, t in enumerate(inputs)]
    out = parse(rhs, "the output") if arrow else None
    return terms, out


def _expand_ellipses(equation, terms, operands):
    """Per operand its labels with '...' replaced by one internal label per broadcast dim (right
    aligned across operands, as NumPy broadcasts), and the list of those internal labels."""
    counts = []
    for i, (term, x) in enumerate(zip(terms, operands)):
        named = len(term) - term.count(".")
        extra = x.dim() - named
        if extra < 0 or (extra > 0 and "." not in term):
            _fail(_core.ShapeError, f"operand {i} has {x.dim()} dims {tuple(x.shape)} but its subscripts "
                                    f"'{''.join(term).replace('.', '...')}' in '{equation}' name {named}")
        counts.append(extra)
    width = max(counts, default=0)
    ellipsis = [f"...{k}" for k in range(width)]
    labelled = []
    for term, extra in zip(terms, counts):
        at = term.index(".") if "." in term else len(term)
        labelled.append(term[:at] + ellipsis[width - extra:] + term[at + 1:])
    return labelled, ellipsis


def _sizes(equation, labelled, operands):
    """{label: size}: letters must agree; broadcast dims may be 1 against any size."""
    sizes = {}
    for i, (labels, x) in enumerate(zip(labelled, operands)):
        for label, n in zip(labels, x.shape):
            seen = sizes.get(label)
            if seen is None or seen == n:
                sizes[label] = n
            elif label.startswith("...") and 1 in (seen, n):
                sizes[label] = max(seen, n)
            else:
                what = "a broadcast dim of '...'" if label.startswith("...") else f"subscript '{label}'"
                _fail(_core.ShapeError, f"{what} has size {seen} in an earlier operand and {n} in operand {i} "
                                        f"of '{equation}'")
    return sizes


def _output(equation, out, labelled, ellipsis):
    if out is None:  # implicit: the broadcast dims, then the letters that occur once, sorted
        counts = {}
        for labels in labelled:
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        return ellipsis + sorted(c for c, k in counts.items() if k == 1 and not c.startswith("..."))
    used = {label for labels in labelled for label in labels}
    letters = [c for c in out if c != "."]
    for c in letters:
        if letters.count(c) > 1:
            _fail(_core.InvalidArgumentError, f"the output of '{equation}' names '{c}' twice")
        if c not in used:
            _fail(_core.InvalidArgumentError, f"the output of '{equation}' names '{c}', which no operand has")
    at = out.index(".") if "." in out else len(out)
    return out[:at] + (ellipsis if "." in out else []) + out[at + 1:]


def _diagonals(x, labels):
    """Takes the diagonal over each label an operand repeats ('ii->i'): the two dims moved last,
    then their diagonal (diagonal_of_last_two)."""
    labels = list(labels)
    for label in dict.fromkeys(labels):
        while labels.count(label) > 1:
            p = labels.index(label)
            q = labels.index(label, p + 1)
            rest = [d for d in range(x.dim()) if d not in (p, q)]
            x = diagonal_of_last_two(x.permute(rest + [p, q]))
            labels = [labels[d] for d in rest] + [label]
    return x, labels


def _sum_out(x, labels, keep):
    dims = [d for d, label in enumerate(labels) if label not in keep]
    if not dims:
        return x, labels
    return x.sum(dims), [label for label in labels if label in keep]


def _arrange(x, labels, order, sizes):
    """x permuted to `order` (a permutation of labels) and expanded to the sizes given."""
    x = x.permute([labels.index(label) for label in order]) if order != labels else x
    full = [sizes[label] for label in order]
    return x.expand(full) if list(x.shape) != full else x


def _contract(a, la, b, lb, keep, sizes):
    """a * b summed over the labels they share that `keep` lacks, as one batched matmul."""
    a, la = _sum_out(a, la, keep | set(lb))
    b, lb = _sum_out(b, lb, keep | set(la))
    batch = [label for label in la if label in lb and label in keep]
    summed = [label for label in la if label in lb and label not in keep]
    a_free = [label for label in la if label not in lb]
    b_free = [label for label in lb if label not in la]

    def numel(labels):
        n = 1
        for label in labels:
            n *= sizes[label]
        return n

    a = _arrange(a, la, batch + a_free + summed, sizes)
    b = _arrange(b, lb, batch + summed + b_free, sizes)
    bn, m, k, n = numel(batch), numel(a_free), numel(summed), numel(b_free)
    product = _core.matmul(a.reshape(bn, m, k), b.reshape(bn, k, n))
    labels = batch + a_free + b_free
    return product.reshape([sizes[label] for label in labels]), labels


def einsum(equation, *operands):
    """Einstein summation, NumPy's and PyTorch's notation: ``fg.einsum("bij,bjk->bik", a, b)``.

    Subscripts are letters; ``...`` stands for broadcast dims (right aligned, size 1 broadcasts);
    a subscript repeated within one operand takes its diagonal; without ``->`` the output holds
    the broadcast dims, then the subscripts that occur once, in alphabetical order; subscripts
    missing from the output are summed (broadcast dims too). Operands may also come as one
    list. Pairs of operands contract left to right with one batched matmul each; everything is
    differentiable. Errors: InvalidArgumentError (malformed equation, operand count), ShapeError
    (dims or sizes that do not match the subscripts), TypeError (non-tensors).
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for i, x in enumerate(operands):
        if not isinstance(x, _core.Tensor):
            raise TypeError(f"einsum: operand {i} must be an fg.Tensor, got {type(x).__name__}")
    if not operands:
        _fail(_core.InvalidArgumentError, "no operands")
    terms, out = _terms(equation, len(operands))
    labelled, ellipsis = _expand_ellipses(equation, terms, operands)
    sizes = _sizes(equation, labelled, operands)
    output = _output(equation, out, labelled, ellipsis)
    dtype = operands[0].dtype
    for x in operands[1:]:
        dtype = _core.promote_types(dtype, x.dtype)
    pairs = [_diagonals(x.to(dtype=dtype) if x.dtype != dtype else x, labels) for x, labels in zip(operands, labelled)]
    x, labels = pairs[0]
    for i in range(1, len(pairs)):
        later = {label for _, ls in pairs[i + 1:] for label in ls}
        x, labels = _contract(x, labels, *pairs[i], set(output) | later, sizes)
    x, labels = _sum_out(x, labels, set(output))
    return _arrange(x, labels, output, sizes)
