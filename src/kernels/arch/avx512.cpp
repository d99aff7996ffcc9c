// The avx512 kernels: compiled with this ISA's flags only (see src/CMakeLists.txt).
#define ATTN_ISA_NAMESPACE isa_avx512
#include "kernels/instantiate.hpp"

ATTN_DEFINE_KERNEL_TABLE(xsimd::avx512f, avx512)
