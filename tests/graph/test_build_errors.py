"""build() validation: every mistake raises GraphError naming the node and tag involved."""
import pytest

import flowgrad as fg
from flowgrad import nn


def lin():
    return nn.Linear(3, 3)


CASES = [
    ("duplicate tag",
     lambda: fg.flow(lin()).tag("h").through(lin()).tag("h"),
     r"duplicate tag 'h' on node 1 'h' \(Linear\) and node 2 'h' \(Linear\)"),
    ("unknown ref",
     lambda: fg.flow(lin()).through(lin()).using("nope"),
     r"unknown tag 'nope' in using\(\) at node 2 \(Linear\) \(defined tags: none\)"),
    ("dangling ref",
     lambda: fg.FlowBuilder().using("h").through(lin()).tag("h"),
     r"using\('h'\) is dangling: there is no node before it"),
    ("ref to a group",
     lambda: fg.flow(lin()).split(lin(), lin()).tag_group("g").merge(fg.flow.Add()).through(lin()).using("g"),
     r"using\('g'\) at node 5 \(Linear\) names a tag group"),
    ("merge without split",
     lambda: fg.flow(lin()).merge(fg.flow.Add()),
     r"merge\(\) without a split"),
    ("open split at build",
     lambda: fg.flow(lin()).split(lin(), lin()),
     r"the split into 2 branches \(node 2 \(Linear\), \.\.\.\) is still open at build\(\)"),
    ("through while split open",
     lambda: fg.flow(lin()).split(lin(), lin()).through(lin()),
     r"through\(\) while the split into 2 branches .* is open: merge the branches first"),
    ("tag on open split",
     lambda: fg.flow(lin()).split(lin(), lin()).tag("b"),
     r"tag\('b'\) on an open split of 2 branches: name them with tag_group\('b'\)"),
    ("tag_group without split",
     lambda: fg.flow(lin()).tag_group("g"),
     r"tag_group\('g'\) needs an open split"),
    ("unfinished loop",
     lambda: fg.flow(lin()).loop(lin()),
     r"node 2 \(loop\(Linear\) for 0\) is unfinished at build\(\): finish it with \.for_\(n\)"),
    ("unfinished map",
     lambda: fg.flow(lin()).map(lin()).batched(),
     r"node 2 \(map\(Linear\) each batched\) is unfinished at build\(\): finish it with \.each\(\)"),
    ("through after unfinished loop",
     lambda: fg.flow(lin()).loop(lin()).through(lin()),
     r"through\(\) after the unfinished node 2 \(loop\(Linear\) for 0\)"),
    ("for_ without loop",
     lambda: fg.flow(lin()).for_(3),
     r"for_\(\) without a preceding \.loop\(body\)"),
    ("each without map",
     lambda: fg.flow(lin()).each(),
     r"each\(\) without a preceding \.map\(body\)"),
    ("forward ref without a state module",
     lambda: fg.flow(lin()).gate(fg.flow.SoftmaxRouter(3, 2), lin(), lin()).using("later").through(lin()).tag("later"),
     r"the forward reference using\('later'\) at node 2 \(gate\(SoftmaxRouter; 2 experts\)\) has no state module"),
    ("map over a later tag",
     lambda: fg.flow(lin()).map(lin()).over("later").through(lin()).tag("later"),
     r"over\('later'\) at node 2 .* refers to a later node"),
    ("until max_iter < 1",
     lambda: fg.flow(lin()).loop(lin()).until(fg.flow.ThresholdHalt(0.0), 0),
     r"until\(\): max_iter must be >= 1"),
    ("empty split",
     lambda: fg.flow(lin()).split(),
     r"split\(\): expected at least one branch module"),
    ("group name equals a tag",
     lambda: fg.flow(lin()).tag("g").split(lin(), lin()).tag_group("g").merge(fg.flow.Add()),
     r"tag group 'g' has the same name as the tag on node 1"),
    ("already tagged",
     lambda: fg.flow(lin()).tag("a").tag("b"),
     r"tag\('b'\): node 1 'a' \(Linear\) is already tagged 'a'"),
]


@pytest.mark.parametrize("name,make,message", CASES, ids=[c[0] for c in CASES])
def test_build_error(name, make, message):
    with pytest.raises(fg.GraphError, match=message):
        make().build()


def test_first_mistake_is_reported():
    b = fg.flow(lin()).merge(fg.flow.Add()).tag("x").tag("x")
    with pytest.raises(fg.GraphError, match=r"merge\(\) without a split"):
        b.build()


def test_build_twice_raises():
    b = fg.flow(lin())
    b.build()
    with pytest.raises(fg.GraphError, match="build\\(\\) was already called"):
        b.build()


def test_non_module_argument():
    with pytest.raises(fg.InvalidArgumentError, match="through: argument 0 is a int, expected a fg.nn.Module"):
        fg.flow(lin()).through(3)
    with pytest.raises(fg.InvalidArgumentError, match="split: argument 1 is a str"):
        fg.flow(lin()).split(lin(), "x")


def test_shape_mismatch_at_first_forward_names_node():
    g = fg.flow(lin()).tag("enc").through(nn.Linear(5, 2)).tag("head").build()
    with pytest.raises(fg.ShapeError, match=r"node 2 'head' \(Linear\): linear: input \(4, 3\) does not end in in_features = 5"):
        g(fg.zeros(4, 3))


def test_unknown_tag_queries():
    g = fg.flow(lin()).tag("h").build()
    with pytest.raises(fg.GraphError, match=r"unknown tag 'x' \(the graph's tags: h\)"):
        g.tagged("x")
    with pytest.raises(fg.GraphError, match="tag 'h' has no value yet: run the graph first"):
        g.tagged("h")
    with pytest.raises(fg.GraphError, match=r"traces\('h'\): node 1 'h' \(Linear\) is not a loop"):
        g.traces("h")
    with pytest.raises(fg.GraphError, match="collect\\('h'\\): the tag has no value yet"):
        g.collect("h")
