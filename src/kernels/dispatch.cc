// ISA selection: builds one kernel table per ISA the CPU supports, once, and points the
// public accessors at the best (or the forced) one.
//
// Adding an ISA: its translation units (for the x86 levels, one more compilation of the
// *_avx2.cc files, see isa_variant.h), an entry in kBuiltIn, and a CPUID check in cpu_has().

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

#include "core/check.h"
#include "core/log.h"
#include "kernels/kernels_internal.h"
#include "kernels/prefetch_feed.h"
#include "kernels/quants.h"

namespace ferrox {

constinit thread_local PrefetchFeed* t_prefetch_feed = nullptr;
namespace {

using FillFn = void (*)(QuantKernels* table, detail::OpsKernels* ops);

struct BuiltIn {
    const char* name;
    bool (*cpu_has)();
    FillFn fill;  // null: the scalar tables as they are
};
// Lowest to highest: the default is the last one the CPU has.
const BuiltIn kBuiltIn[] = {
    {"scalar", [] { return true; }, nullptr},
    {"avx2", cpu_has_avx2, detail::avx2::override_all},
#if defined(__x86_64__) || defined(__i386__)
    {"avx512", cpu_has_avx512, detail::avx512::override_all},
#endif
};
constexpr int kNumBuiltIn = static_cast<int>(sizeof(kBuiltIn) / sizeof(kBuiltIn[0]));
constexpr int kMaxIsas = kNumBuiltIn + 2;  // room for ISAs that tests add

struct Tables {
    const char* names[kMaxIsas] = {};
    detail::OpsKernels ops[kMaxIsas];
    QuantKernels quant[kMaxIsas][detail::kNumWeightTypes];
    bool present[kMaxIsas] = {};
    int count = 0;  // entries in names (present or not)
    int best = 0;   // the highest built-in ISA present
};

// The scalar tables overridden by fill, with the packed activation defaults filled in.
void build_isa(Tables* t, int i, FillFn fill) {
    detail::fill_scalar_quant_kernels(t->quant[i]);
    detail::fill_scalar_ops(&t->ops[i]);
    if (fill != nullptr) fill(t->quant[i], &t->ops[i]);
    for (QuantKernels& k : t->quant[i]) {
        if (k.quantize_packed_act_row == nullptr) {
            k.packed_act_type = k.act_type;
            k.quantize_packed_act_row = k.quantize_act_row;
        }
    }
    t->present[i] = true;
}

// Built on first use (thread-safe static init). Built-in entries never change afterwards;
// add_test_isa() only appends.
Tables& tables() {
    static Tables t = [] {
        Tables t{};
        for (int i = 0; i < kNumBuiltIn; ++i) {
            t.names[i] = kBuiltIn[i].name;
            if (kBuiltIn[i].cpu_has()) {
                build_isa(&t, i, kBuiltIn[i].fill);
                t.best = i;
            }
        }
        t.count = kNumBuiltIn;
        return t;
    }();
    return t;
}

int isa_from_name(const char* name) {
    const Tables& t = tables();
    for (int i = 0; i < t.count; ++i)
        if (std::strcmp(name, t.names[i]) == 0) return i;
    return -1;
}

int default_isa() {
    const Tables& t = tables();
    const int best = t.best;
    if (const char* env = std::getenv("FERROX_KERNELS_ISA")) {
        const int want = isa_from_name(env);
        if (want >= 0 && t.present[want]) return want;
        FERROX_LOG_WARN("FERROX_KERNELS_ISA=%s is not available here; using %s", env,
                        t.names[best]);
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
#if defined(__clang__) && __clang_major__ < 16
        // clang before 16 has no "f16c" for __builtin_cpu_supports: CPUID.1:ECX bit 29.
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
#endif
    }();
    return has;
#else
    return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
    // libgcc sets the AVX-512 features only when the OS saves the ZMM and mask state.
    static const bool has = [] {
        __builtin_cpu_init();
        return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
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

const char* kernels_isa_name() { return tables().names[current_isa()]; }

void kernels_force_isa(const char* name) {
    const int isa = isa_from_name(name);
    CHECK_MSG(isa >= 0, "unknown ISA name");
    CHECK_MSG(tables().present[isa], "ISA not supported by this CPU");
    g_isa.store(isa, std::memory_order_relaxed);
}

bool kernels_isa_available(const char* name) {
    const int isa = isa_from_name(name);
    return isa >= 0 && tables().present[isa];
}

namespace detail {
const OpsKernels& ops_kernels() { return tables().ops[current_isa()]; }

void add_test_isa(const char* name, FillFn fill) {
    static std::mutex mu;
    const std::lock_guard<std::mutex> lock(mu);
    if (isa_from_name(name) >= 0) return;
    Tables& t = tables();
    CHECK_MSG(t.count < kMaxIsas, "too many test ISAs");
    const int i = t.count;
    build_isa(&t, i, fill);
    t.names[i] = name;
    t.count = i + 1;
}
}  // namespace detail

}  // namespace ferrox
