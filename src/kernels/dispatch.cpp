// Runtime ISA dispatch: which kernel table this CPU can run. Compiled without ISA flags.
#include "kernels/kernels.hpp"

#include <atomic>

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace attn::kernels {

const kernel_table *kernel_table_sse4();
const kernel_table *kernel_table_avx2();
const kernel_table *kernel_table_avx512();
const kernel_table *kernel_table_avx512_bf16();
const kernel_table *kernel_table_amx();
const kernel_table *kernel_table_amx_emulated();  // src/kernels/amx/tables.cpp

namespace {

// XCR0: which register states the OS saves and restores (XGETBV needs OSXSAVE, checked).
uint64_t os_saved_states() {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t(hi) << 32) | lo;
}

// CPUID leaf 1 ECX bit 29: F16C (VCVTPH2PS, VCVTPS2PH), used by the AVX2 and AVX-512 levels
// for f16 tensors; every AVX2 CPU has it.
bool cpu_has_f16c() {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

// CPUID leaf 7, subleaf 1, EAX bit 5: AVX512_BF16 (VCVTNE2PS2BF16, VDPBF16PS).
bool cpu_has_avx512_bf16() {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 5) & 1;
}

// AMX-BF16 and AMX-TILE (CPUID leaf 7 EDX bits 22, 24), the tile configuration and data
// states enabled in XCR0 (bits 17, 18), and the Linux kernel's permission for this process
// to use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA; Linux 5.16+).
// The permission is per process and asked for once; if the kernel refuses, AMX is absent.
bool amx_usable() {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    if (!amx_bf16 || !amx_tile) return false;
    const uint64_t tile_states = (uint64_t(1) << 17) | (uint64_t(1) << 18);
    if ((os_saved_states() & tile_states) != tile_states) return false;
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    static const bool granted = syscall(SYS_arch_prctl, arch_req_xcomp_perm,
                                        xfeature_xtiledata) == 0;
    return granted;
}

}  // namespace

attn_isa best_supported_isa() {
    // __builtin_cpu_supports consults CPUID and, for AVX and AVX-512, whether the OS saves
    // the wider registers (XGETBV), so an ISA it reports can be executed.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("fma")) {
        if (!cpu_has_avx512_bf16()) return ATTN_ISA_AVX512;
        return amx_usable() ? ATTN_ISA_AMX : ATTN_ISA_AVX512_BF16;
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("fma"))
        return ATTN_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
        return ATTN_ISA_AVX2;
    if (__builtin_cpu_supports("sse4.2")) return ATTN_ISA_SSE4;
    return ATTN_ISA_SCALAR;
}

bool isa_supported(attn_isa isa) {
    const attn_isa best = best_supported_isa();
    if (isa == ATTN_ISA_AMX_EMULATED)  // the tile model, on the avx512_bf16 kernels
        return best == ATTN_ISA_AVX512_BF16 || best == ATTN_ISA_AMX;
    return isa <= best;
}

namespace {

// The bytes of the AMD core's level-3 cache (CPUID 0x8000001D, the cache properties' leaf),
// 0 where the leaf does not say.
int64_t amd_l3_bytes() {
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x8000001d) return 0;
    for (unsigned i = 0; i < 8; ++i) {
        __cpuid_count(0x8000001d, i, a, b, c, d);
        const unsigned type = a & 0x1f, level = (a >> 5) & 0x7;
        if (type == 0) break;
        if (level == 3 && (type == 1 || type == 3))  // data or unified
            return int64_t((b >> 22) + 1) * int64_t(((b >> 12) & 0x3ff) + 1) * int64_t((b & 0xfff) + 1) *
                   int64_t(c + 1);
    }
    return 0;
}

// The policy set_decode_prefetch() gives, if any.
std::atomic<const decode_prefetch_policy *> &prefetch_policy_given() {
    static std::atomic<const decode_prefetch_policy *> given{nullptr};
    return given;
}

}  // namespace

void set_decode_prefetch(const decode_prefetch_policy *policy) { prefetch_policy_given().store(policy); }

const decode_prefetch_policy &decode_prefetch() {
    // Decoding over a cache from memory (H32 over 32 KV heads, D128, Lk16384): on Zen 5
    // (family 26) 8 KB ahead (I8: 64 keys) took 0.9x the time of 16 keys ahead, bf16 the same;
    // on Zen 4 (family 25) 16 keys ahead took 0.77-0.95x the time of 8 KB ahead (f32 queries
    // over bf16, I8, I4 and E4M3, 1 and 2 threads, 8 alternated rounds). On Zen 4, where the
    // call's K and V exceed the L3, no software prefetch at all took less time again for rows
    // of 128 and 256 bytes (D128, 32 KV heads, 4-6 alternated rounds, 1 / 2 threads: bf16
    // 0.68-0.94x, f16 0.74-0.88x, I8 0.75-0.87x, E4M3 0.68-0.78x), not for I4's of 64 (0.94-
    // 1.06x), and 1.15-1.6x the time for f32's of 512; 1.4-1.9x for bf16 held in the L3 (8
    // KV heads, Lk4096). Rows of 256 bytes or more from memory that are prefetched (f32's;
    // bf16's where several rows read a KV head) go into the L2 only (row_prefetch: f32 0.58-
    // 0.78x the time). Others as Zen 5.
    static const decode_prefetch_policy policy = [] {
        __builtin_cpu_init();  // (as best_supported_isa: CPUID read by the compiler's runtime)
        if (!__builtin_cpu_is("amdfam19h")) return decode_prefetch_policy{8192, 0, 0, 0, 0};
        return decode_prefetch_policy{1024, 128, 512, 256, amd_l3_bytes()};  // 1024: the 16-key floor
    }();
    const decode_prefetch_policy *given = prefetch_policy_given().load();
    return given ? *given : policy;
}

const kernel_table *kernel_table_for(attn_isa isa) {
    switch (isa) {
    case ATTN_ISA_AMX_EMULATED: return kernel_table_amx_emulated();
    case ATTN_ISA_AMX: return kernel_table_amx();
    case ATTN_ISA_AVX512_BF16: return kernel_table_avx512_bf16();
    case ATTN_ISA_AVX512: return kernel_table_avx512();
    case ATTN_ISA_AVX2: return kernel_table_avx2();
    case ATTN_ISA_SSE4: return kernel_table_sse4();
    case ATTN_ISA_SCALAR:
    case ATTN_ISA_AUTO: return nullptr;
    }
    return nullptr;
}

}  // namespace attn::kernels
