// The op table (ops.def) as constexpr C++: op ids, names, groups, autocast policies and the
// elementwise functions. A leaf header in C++17 (no project includes), so the kernels, CUDA
// sources included, can read the table too; lookups are array reads, cheap enough for run_op's hot path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fg {

enum class OpId : uint16_t {
#define FG_OP(name, groups, autocast) name,
#include "flowgrad/base/ops.def"
  None  // not a table op: the stand-ins of a compiled plan's branch instructions
};
constexpr size_t kOpCount = static_cast<size_t>(OpId::None);

// What passes, autocast and the kernels ask about an op ("is it elementwise?"), never its name.
enum class Group : uint32_t {
  None = 0,
  Elementwise = 1u << 0,    // one output per element of the broadcast inputs: may join a fused chain
  FloatOnly = 1u << 1,      // the result is floating: integer inputs compute in the default float
  Arithmetic = 1u << 2,     // not defined for two bool operands
  Comparison = 1u << 3,     // returns bool
  Bitwise = 1u << 4,        // bool and integer operands only
  View = 1u << 5,           // output aliases input 0's storage; no kernel runs
  Random = 1u << 6,         // draws Philox counters past its {seed, base} pair input: a host pair
                            // from the generator eagerly, the plan's pair (or one derived from it) in plans
  DataDependent = 1u << 7,  // output shape depends on input values: never captured
  HostSync = 1u << 8,       // on CUDA the kernel reads device values on the host (nonzero's count):
                            // a sync, so a compiled CUDA step refuses the op. Index validation is
                            // not one: CUDA kernels check on the device (flowgrad/base/device_error.h)
  InPlace = 1u << 9,        // output 0 is input 0: run_op writes into input 0 instead of allocating
  Atomic = 1u << 10,        // on CUDA the kernel adds floats with atomics: sums depend on block order
};
constexpr Group operator|(Group a, Group b) {
  return static_cast<Group>(static_cast<uint32_t>(a) | static_cast<uint32_t>(b));
}

// Autocast: GEMM-like ops run in the low dtype, ops that need range in float32, others follow.
enum class AutocastPolicy : uint8_t { FollowInputs, LowPrecision, Float32 };

// The function an elementwise kernel applies: the FG_UNARY/FG_BINARY rows, in table order.
enum class UnaryFn : uint8_t {
#define FG_UNARY(name, Functor, groups, autocast, api, saved, doc) Functor,
#include "flowgrad/base/ops.def"
};
enum class BinaryFn : uint8_t {
#define FG_BINARY(name, Functor, groups, autocast, api, saved, doc) Functor,
#include "flowgrad/base/ops.def"
};

namespace op_table {
// The bare names the rows use (C++17: the CUDA sources include this header too).
constexpr Group None = Group::None, Elementwise = Group::Elementwise, FloatOnly = Group::FloatOnly,
                Arithmetic = Group::Arithmetic, Comparison = Group::Comparison, Bitwise = Group::Bitwise,
                View = Group::View, Random = Group::Random, DataDependent = Group::DataDependent,
                HostSync = Group::HostSync, InPlace = Group::InPlace, Atomic = Group::Atomic;
constexpr AutocastPolicy FollowInputs = AutocastPolicy::FollowInputs,
                         LowPrecision = AutocastPolicy::LowPrecision, Float32 = AutocastPolicy::Float32;

inline constexpr std::string_view kNames[kOpCount + 1] = {
#define FG_OP(name, groups, autocast) #name,
#include "flowgrad/base/ops.def"
    "(none)"};
inline constexpr uint32_t kGroups[kOpCount + 1] = {
#define FG_OP(name, groups, autocast) static_cast<uint32_t>(groups),
#include "flowgrad/base/ops.def"
    0};
inline constexpr AutocastPolicy kAutocast[kOpCount + 1] = {
#define FG_OP(name, groups, autocast) autocast,
#include "flowgrad/base/ops.def"
    FollowInputs};
inline constexpr OpId kUnaryOps[] = {
#define FG_UNARY(name, Functor, groups, autocast, api, saved, doc) OpId::name,
#include "flowgrad/base/ops.def"
};
inline constexpr OpId kBinaryOps[] = {
#define FG_BINARY(name, Functor, groups, autocast, api, saved, doc) OpId::name,
#include "flowgrad/base/ops.def"
};

// A write never goes through a cast: in-place rows follow their inputs.
constexpr bool in_place_rows_follow_inputs() {
  for (size_t i = 0; i < kOpCount; ++i)
    if ((kGroups[i] & static_cast<uint32_t>(InPlace)) && kAutocast[i] != FollowInputs) return false;
  return true;
}
static_assert(in_place_rows_follow_inputs(), "ops.def: an InPlace row must have the FollowInputs autocast policy");
}  // namespace op_table

constexpr std::string_view op_name(OpId id) { return op_table::kNames[static_cast<size_t>(id)]; }
constexpr bool in_group(OpId id, Group g) {
  return (op_table::kGroups[static_cast<size_t>(id)] & static_cast<uint32_t>(g)) != 0;
}
constexpr AutocastPolicy autocast_policy(OpId id) { return op_table::kAutocast[static_cast<size_t>(id)]; }
constexpr OpId op_of(UnaryFn fn) { return op_table::kUnaryOps[static_cast<size_t>(fn)]; }
constexpr OpId op_of(BinaryFn fn) { return op_table::kBinaryOps[static_cast<size_t>(fn)]; }

}  // namespace fg
