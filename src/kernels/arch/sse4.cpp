// The sse4 kernels: compiled with this ISA's flags only (see src/CMakeLists.txt).
#define ATTN_ISA_NAMESPACE isa_sse4
#include "kernels/instantiate.hpp"

ATTN_DEFINE_KERNEL_TABLE(xsimd::sse4_2, sse4)
