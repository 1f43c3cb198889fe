// CPU capability selection. Kernels are compiled once per SIMD target by
// Highway (src/kernels/cpu/*_simd.cpp); which target runs is Highway's
// dynamic dispatch, which we constrain with hwy::DisableTargets so that
// KILN_CPU_CAPABILITY and set_cpu_capability can force a lower variant.
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "kiln/error.h"
#include "kiln/runtime.h"

#include "core/arm_features.h"

namespace kiln {
namespace {

int64_t target_bits(Capability c) {
  switch (c) {
    case Capability::Scalar: return HWY_EMU128 | HWY_SCALAR;
    case Capability::SSE4: return HWY_SSE4;
    case Capability::AVX2: return HWY_AVX2;
    case Capability::AVX512: return HWY_AVX3 | HWY_AVX3_DL;
    case Capability::NEON: return HWY_NEON;
    case Capability::SVE: return HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128;
  }
  return 0;
}

// Capabilities in the order of preference on this architecture.
std::vector<Capability> ladder() {
#if HWY_ARCH_X86
  return {Capability::Scalar, Capability::SSE4, Capability::AVX2, Capability::AVX512};
#elif HWY_ARCH_ARM
  return {Capability::Scalar, Capability::NEON, Capability::SVE};
#else
  return {Capability::Scalar};
#endif
}

// hwy::SupportedTargets() of Highway 1.0 (Debian 12) stores the CPU's full
// target set as the dispatch choice before it applies DisableTargets' mask,
// so after any call to it dispatch went back to the best target whatever
// set_cpu_capability had chosen (the per-capability kernel tests all ran
// AVX-512 code). Every call goes through here, which stores the masked set.
int64_t supported_targets() {
  const int64_t bits = hwy::SupportedTargets();
  hwy::GetChosenTarget().Update(bits);
  return bits;
}

// What the CPU supports and this build compiled, read before any mask.
int64_t compiled_and_supported() {
  static const int64_t bits = supported_targets() & HWY_TARGETS;
  return bits;
}

std::mutex cap_mu;

struct EnvCapability {
  EnvCapability() {
    compiled_and_supported();
    const char* env = std::getenv("KILN_CPU_CAPABILITY");
    if (!env || !*env) return;
    try {
      set_cpu_capability(parse_capability(env));
    } catch (const Error& e) {
      std::fprintf(stderr, "kiln: ignoring KILN_CPU_CAPABILITY: %s\n", e.what());
    }
  }
} env_capability;

}  // namespace

const char* capability_name(Capability c) {
  static constexpr const char* names[] = {"scalar", "sse4", "avx2", "avx512", "neon", "sve"};
  return names[static_cast<int>(c)];
}

Capability parse_capability(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(Capability::SVE); ++i) {
    auto c = static_cast<Capability>(i);
    if (name == capability_name(c)) return c;
  }
  fail("cpu_capability", "expected one of scalar, sse4, avx2, avx512, neon, sve but got '", name, "'");
}

std::vector<Capability> available_capabilities() {
  std::vector<Capability> out;
  for (Capability c : ladder())
    if (compiled_and_supported() & target_bits(c)) out.push_back(c);
  return out;
}

// cpu_capability()'s answer until set_cpu_capability changes it (-1: not
// known): reading it from Highway runs CPUID, which kernels asking per call
// (the int8 GEMM) would pay every time.
namespace {
std::atomic<int> cached_capability{-1};
}  // namespace

Capability cpu_capability() {
  const int cached = cached_capability.load(std::memory_order_acquire);
  if (cached >= 0) return static_cast<Capability>(cached);
  std::lock_guard<std::mutex> lock(cap_mu);
  const int64_t now = supported_targets() & HWY_TARGETS;
  Capability best = Capability::Scalar;
  for (Capability c : ladder())
    if (now & target_bits(c)) best = c;
  cached_capability.store(static_cast<int>(best), std::memory_order_release);
  return best;
}

void set_cpu_capability(Capability c) {
  auto avail = available_capabilities();
  bool ok = false;
  for (Capability a : avail) ok = ok || a == c;
  if (!ok) {
    std::string list;
    for (Capability a : avail) list += std::string(list.empty() ? "" : ", ") + capability_name(a);
    fail("set_cpu_capability", "capability '", capability_name(c), "' is not available here; available: ", list);
  }
  int64_t allowed = 0;
  for (Capability l : ladder()) {
    allowed |= target_bits(l);
    if (l == c) break;
  }
  std::lock_guard<std::mutex> lock(cap_mu);
  hwy::DisableTargets(~allowed);
  cached_capability.store(-1, std::memory_order_release);
}

std::string cpu_architecture() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

std::vector<std::string> cpu_features() {
  std::vector<std::string> out;
#if defined(__x86_64__)
  // (__builtin_cpu_supports takes literals only.)
  const std::pair<const char*, bool> x86[] = {
      {"sse4.2", __builtin_cpu_supports("sse4.2")},         {"avx2", __builtin_cpu_supports("avx2")},
      {"fma", __builtin_cpu_supports("fma")},               {"avx512f", __builtin_cpu_supports("avx512f")},
      {"avx512bw", __builtin_cpu_supports("avx512bw")},     {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16")}};
  for (const auto& [name, has] : x86)
    if (has) out.push_back(name);
#elif defined(__aarch64__)
  // What the kernel (or qemu) says this CPU has.
  using arm::Feature;
  const std::pair<const char*, bool> features[] = {
      {"asimd", arm::has(Feature::ASIMD)}, {"dotprod", arm::has(Feature::DotProd)}, {"sve", arm::has(Feature::SVE)},
      {"sve2", arm::has(Feature::SVE2)},   {"i8mm", arm::has(Feature::I8MM)},       {"bf16", arm::has(Feature::BF16)}};
  for (const auto& [name, has] : features)
    if (has) out.push_back(name);
#endif
  return out;
}

std::vector<std::string> simd_targets_compiled() {
  std::vector<std::string> out;
  for (int64_t bits = HWY_TARGETS; bits != 0; bits &= bits - 1) out.push_back(hwy::TargetName(bits & -bits));
  return out;
}

std::string simd_target() {
  std::lock_guard<std::mutex> lock(cap_mu);
  const int64_t now = supported_targets() & HWY_TARGETS;
  // Highway's best target is its lowest set bit.
  return now ? hwy::TargetName(now & -now) : "none";
}

}  // namespace kiln
