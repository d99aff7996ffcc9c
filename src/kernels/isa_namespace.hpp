// The namespace of one instruction set's kernels. Every kernel template lives in
// attn::kernels::ATTN_ISA_NAMESPACE, an inline namespace (callers write kernels::name), and
// each src/kernels/arch/<isa>.cpp names its own (isa_sse4, isa_avx512, ...) before it includes
// the kernels: an instantiation compiled with one ISA's flags is then a symbol of that ISA
// only, never one the linker could take for another's. Files compiled without ISA flags (the
// drivers) see the kernel headers in isa_none.
#pragma once

#ifndef ATTN_ISA_NAMESPACE
#define ATTN_ISA_NAMESPACE isa_none
#endif

#define ATTN_KERNELS_BEGIN namespace attn::kernels { inline namespace ATTN_ISA_NAMESPACE {
#define ATTN_KERNELS_END }}
