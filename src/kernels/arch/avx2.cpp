// The avx2 kernels: compiled with this ISA's flags only (see src/CMakeLists.txt).
#define ATTN_ISA_NAMESPACE isa_avx2
#include "kernels/instantiate.hpp"

ATTN_DEFINE_KERNEL_TABLE(xsimd::fma3<xsimd::avx2>, avx2)
