// The avx512 kernels: compiled with this ISA's flags only (see src/CMakeLists.txt).
#include "kernels/instantiate.hpp"

ATTN_DEFINE_KERNEL_TABLE(xsimd::avx512f, avx512)
