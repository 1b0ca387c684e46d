// The CPU attention kernels' work against the sequence length, at every instruction-set level this
// machine runs (set_cpu_isa, as FLOWGRAD_ISA): forward + backward of one head, T = L = S from 16
// to 2048 (neighbours at most 1.25x apart, the sweep of bench_attention.py --sweep extended) and
// head dims 16 to 128, causal and not. The work is what the kernels count themselves
// (attention_cpu_work_take: calls of the register-blocked product and their multiply-adds,
// padding included), a deterministic proxy for their time: no step of more than 2x between
// neighbours (the work itself grows at most 1.25^2 = 1.56x) means no padding or blocking edge
// multiplies it, and the padding never makes it more than 3x the exact products' (the forward's 2
// and the backward's 5 products of a (T, E) head; half of each under the causal mask). Every T
// runs the same kernels, so a time step above that of the work would come from memory, not from
// a path switch: this is what the test cannot see, and the sweep's timings are for.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/common/cpu_dispatch.h"
#include "kernels/attention/attention.h"

namespace fg {
namespace {

constexpr int64_t kLengths[] = {16,  20,  24,  30,  32,  40,  48,  56,  63,  64,  65,  80,  96,  112,  127, 128, 129,
                                160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048};

// Forward + backward of one (T, E) head in float32; the work both passes counted.
AttentionCpuWork head_work(int64_t T, int64_t E, bool causal) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> q(T * E), k(T * E), v(T * E), dout(T * E), out(T * E), dq(T * E), dk(T * E), dv(T * E);
  for (auto* x : {&q, &k, &v, &dout})
    for (float& f : *x) f = dist(gen);
  std::vector<float> stats(2 * T);
  AttentionOperands x;
  x.batch_ndim = 1, x.batch_shape[0] = 1;
  auto operand = [&](std::vector<float>& m) { AttentionOperand o; o.data = m.data(), o.ld = E, o.batch_stride[0] = T * E; return o; };
  x.q = operand(q), x.k = operand(k), x.v = operand(v), x.out = operand(out), x.dout = operand(dout);
  x.dq = operand(dq), x.dk = operand(dk), x.dv = operand(dv);
  AttentionShape s{1, T, T, E, E, 1.0 / std::sqrt(double(E)), causal};
  attention_cpu_work_take();
  attention_forward_cpu(KernelEnv{}, DType::Float32, s, AttentionMask{}, x, stats.data());
  attention_backward_cpu(KernelEnv{}, DType::Float32, s, AttentionMask{}, x, stats.data());
  for (float f : dq) EXPECT_TRUE(std::isfinite(f));
  return attention_cpu_work_take();
}

TEST(AttentionCpuWork, NoStepOfMoreThanTwiceBetweenNeighbouringLengthsAtEveryLevel) {
  const Isa saved = cpu_isa();
  int levels = 0;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (isa < cpu_isa_baseline() || isa > cpu_isa_machine()) continue;
    set_cpu_isa(isa_name(isa)), ++levels;
    for (int64_t E : {16, 32, 64, 128})
      for (bool causal : {true, false}) {
        AttentionCpuWork last;
        for (int64_t T : kLengths) {
          if (E != 32 && T > 512) break;  // the long rows once, at the transformer's head dim
          const AttentionCpuWork work = head_work(T, E, causal);
          const double exact = 7.0 * double(T) * double(T) * double(E) / (causal ? 2.0 : 1.0);
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " E=" << E << " causal=" << causal << " T=" << T);
          EXPECT_LE(work.multiply_adds, 3.0 * exact);
          EXPECT_GE(work.multiply_adds, exact);
          if (last.products > 0) {
            EXPECT_LE(double(work.multiply_adds) / double(last.multiply_adds), 2.0);
            EXPECT_LE(double(work.products) / double(last.products), 2.0);
          }
          last = work;
        }
      }
  }
  set_cpu_isa(isa_name(saved));
  EXPECT_GE(levels, 1);
}

}  // namespace
}  // namespace fg
