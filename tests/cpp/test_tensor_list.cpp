// TensorList, every op call's inputs: a braced list or a moved-in vector is held, so a TensorList
// variable made from one stays valid (the braced form once pointed into a dead initializer_list);
// a vector lvalue or a copied TensorList is a view that adds no reference.
#include <gtest/gtest.h>

#include "flowgrad/ops/registry.h"

namespace fg {
namespace {

Tensor make() { return Tensor::empty({3}, DType::Float32, cpu_device()); }
long refs(const Tensor& t) { return t.impl_ptr().use_count(); }

TEST(TensorList, BracedListHoldsItsTensorsPastTheStatement) {
  Tensor a = make();
  TensorList in = {a, make()};  // make()'s tensor is a temporary of this statement
  ASSERT_EQ(in.size(), 2u);
  EXPECT_TRUE(in[0].is_same(a));
  EXPECT_EQ(refs(a), 2);      // `a` and the list's copy
  EXPECT_EQ(refs(in[1]), 1);  // only the list keeps the temporary alive
  EXPECT_EQ(in[1].numel(), 3);
}

TEST(TensorList, DestroyingAHeldListReleasesItsTensors) {
  Tensor a = make();
  {
    TensorList in = {a, a, a};
    EXPECT_EQ(refs(a), 4);
  }
  EXPECT_EQ(refs(a), 1);
}

TEST(TensorList, HoldsTheLongestBracedList) {
  Tensor a = make();
  TensorList in = {a, a, a, a, a, a, a, a};
  static_assert(TensorList::kMaxBraced == 8);
  EXPECT_EQ(in.size(), 8u);
  EXPECT_EQ(refs(a), 9);
  for (const Tensor& t : in) EXPECT_TRUE(t.is_same(a));
}

TEST(TensorList, MovedInVectorIsKept) {
  Tensor a = make();
  TensorList in = Tensors{a, make()};
  ASSERT_EQ(in.size(), 2u);
  EXPECT_TRUE(in[0].is_same(a));
  EXPECT_EQ(refs(in[1]), 1);
  EXPECT_EQ(in.vec().size(), 2u);
}

TEST(TensorList, VectorLvaluesAndCopiesAreViews) {
  Tensors v{make(), make()};
  TensorList view = v;
  EXPECT_EQ(view.begin(), v.data());
  EXPECT_EQ(view.size(), 2u);
  EXPECT_EQ(refs(v[0]), 1);
  TensorList held = {v[0]};
  TensorList copy = held;
  EXPECT_EQ(copy.begin(), held.begin());
  EXPECT_EQ(refs(v[0]), 2);  // only `held` took a reference
}

TEST(TensorList, EmptyLists) {
  TensorList none, braced = {}, from_empty = Tensors{};
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(braced.empty());
  EXPECT_TRUE(from_empty.empty());
  EXPECT_EQ(none.begin(), none.end());
}

}  // namespace
}  // namespace fg
