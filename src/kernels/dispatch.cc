// ISA selection: builds one kernel table per ISA the CPU supports, once, and points the
// public accessors at the best (or the forced) one.
//
// Adding an ISA (e.g. AVX-512): a new translation unit with override_<isa>_*(), an entry in
// Isa and kIsaNames, a CPUID check in isa_supported(), and a case in build_tables().

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/log.h"
#include "kernels/kernels_internal.h"
#include "kernels/quants.h"

namespace ferrox {
namespace {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kCount = 2 };
constexpr const char* kIsaNames[] = {"scalar", "avx2"};

bool isa_supported(Isa isa) {
    switch (isa) {
        case Isa::kScalar:
            return true;
        case Isa::kAvx2:
            return cpu_has_avx2();
        default:
            return false;
    }
}

struct Tables {
    detail::OpsKernels ops[static_cast<int>(Isa::kCount)];
    QuantKernels quant[static_cast<int>(Isa::kCount)][detail::kNumWeightTypes];
    bool present[static_cast<int>(Isa::kCount)] = {};
};

// Built on first use (thread-safe static init); never modified afterwards.
const Tables& tables() {
    static const Tables t = [] {
        Tables t{};
        detail::fill_scalar_quant_kernels(t.quant[0]);
        detail::fill_scalar_ops(&t.ops[0]);
        t.present[0] = true;
        if (isa_supported(Isa::kAvx2)) {
            const int i = static_cast<int>(Isa::kAvx2);
            std::memcpy(t.quant[i], t.quant[0], sizeof(t.quant[0]));
            t.ops[i] = t.ops[0];
            detail::override_avx2_quant_kernels(t.quant[i]);
            detail::override_avx2_packed(t.quant[i]);
            detail::override_avx2_packed_kquants(t.quant[i]);
            detail::override_avx2_packed_f16(t.quant[i]);
            detail::override_avx2_ops(&t.ops[i]);
            t.present[i] = true;
        }
        for (auto& per_isa : t.quant) {
            for (QuantKernels& k : per_isa) {
                if (k.quantize_packed_act_row == nullptr) {
                    k.packed_act_type = k.act_type;
                    k.quantize_packed_act_row = k.quantize_act_row;
                }
            }
        }
        return t;
    }();
    return t;
}

int isa_from_name(const char* name) {
    for (int i = 0; i < static_cast<int>(Isa::kCount); ++i)
        if (std::strcmp(name, kIsaNames[i]) == 0) return i;
    return -1;
}

int default_isa() {
    const Tables& t = tables();
    int best = 0;
    for (int i = 0; i < static_cast<int>(Isa::kCount); ++i)
        if (t.present[i]) best = i;
    if (const char* env = std::getenv("FERROX_KERNELS_ISA")) {
        const int want = isa_from_name(env);
        if (want >= 0 && t.present[want]) return want;
        FERROX_LOG_WARN("FERROX_KERNELS_ISA=%s is not available here; using %s", env,
                        kIsaNames[best]);
    }
    return best;
}

// -1 until first use. Relaxed is enough: every value stored names a fully built table.
std::atomic<int> g_isa{-1};

int current_isa() {
    int isa = g_isa.load(std::memory_order_relaxed);
    if (__builtin_expect(isa < 0, 0)) {
        isa = default_isa();
        g_isa.store(isa, std::memory_order_relaxed);
    }
    return isa;
}

}  // namespace

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    }();
    return has;
#else
    return false;
#endif
}

const QuantKernels& quant_kernels(DType weight_type) {
    const int idx = detail::kernel_index(weight_type);
    CHECK_MSG(idx >= 0, "no kernels for this tensor type");
    return tables().quant[current_isa()][idx];
}

const char* kernels_isa_name() { return kIsaNames[current_isa()]; }

void kernels_force_isa(const char* name) {
    const int isa = isa_from_name(name);
    CHECK_MSG(isa >= 0, "unknown ISA name");
    CHECK_MSG(tables().present[isa], "ISA not supported by this CPU");
    g_isa.store(isa, std::memory_order_relaxed);
}

namespace detail {
const OpsKernels& ops_kernels() { return tables().ops[current_isa()]; }
}  // namespace detail

}  // namespace ferrox
