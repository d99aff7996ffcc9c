// attn_merge_f32: argument checks, then the driver.
#include <cstdio>

#include "api/context.hpp"
#include "api/error.hpp"
#include "api/validate.hpp"
#include "ops/ops.hpp"

extern "C" attn_status attn_merge_f32(attn_context *ctx, int64_t parts, int64_t rows,
                                      int64_t dim_v, const float *const *outs,
                                      const float *const *lses, float *out, float *lse) {
    using namespace attn::api;
    static const char *const fn = "attn_merge_f32";
    return guarded(fn, [&] {
        checker chk(fn);
        chk.at_least(parts, 1, "parts");
        chk.at_least(rows, 0, "rows");
        chk.at_least(dim_v, 1, "dim_v");
        const int64_t out_dims[] = {rows, dim_v};
        chk.product(out_dims, 2, "rows * dim_v");
        if (chk.failed()) return chk.status();
        if (rows == 0) return ATTN_OK;  // no row to write

        chk.not_null(outs, "outs", "rows > 0");
        chk.not_null(lses, "lses", "rows > 0");
        chk.not_null(out, "out", "rows > 0");
        // The pointer arrays themselves are inputs too: writing out must not clobber them.
        // A pointer is a whole number of the checks' 4-byte elements.
        const int64_t ptr_elems = int64_t(sizeof(const float *) / 4);
        const int64_t array_dims[] = {parts, ptr_elems};
        const int64_t array_len = chk.product(array_dims, 2, "parts * sizeof(float *) / 4");
        tensor_ref t_outs = vector_tensor("outs", outs, array_len);
        tensor_ref t_lses = vector_tensor("lses", lses, array_len);
        chk.span(t_outs);
        chk.span(t_lses);
        tensor_ref t_out = matrix_tensor("out", out, rows, dim_v, dim_v);
        tensor_ref t_lse = lse ? vector_tensor("lse", lse, rows) : tensor_ref{};
        chk.span(t_out);
        chk.span(t_lse);
        chk.disjoint(t_out, t_lse);
        for (const tensor_ref *array : {&t_outs, &t_lses}) {
            chk.disjoint(t_out, *array);
            chk.disjoint(t_lse, *array);
        }
        if (chk.failed()) return chk.status();

        // Every part: non-null, and disjoint from both outputs. Names like "outs[3]" live in
        // this buffer only while the part is checked (a failure copies them into the message).
        char part_name[2][32];
        for (int64_t p = 0; p < parts && !chk.failed(); ++p) {
            std::snprintf(part_name[0], sizeof part_name[0], "outs[%lld]", (long long)p);
            std::snprintf(part_name[1], sizeof part_name[1], "lses[%lld]", (long long)p);
            chk.not_null(outs[p], part_name[0], "rows > 0");
            chk.not_null(lses[p], part_name[1], "rows > 0");
            tensor_ref t_part = matrix_tensor(part_name[0], outs[p], rows, dim_v, dim_v);
            tensor_ref t_part_lse = vector_tensor(part_name[1], lses[p], rows);
            chk.span(t_part);
            chk.span(t_part_lse);
            chk.outputs_disjoint({&t_out, &t_lse}, {&t_part, &t_part_lse});
        }
        if (chk.failed()) return chk.status();

        attn::ops::merge(exec_for(context_or_default(ctx)), parts, rows, dim_v, outs, lses, out,
                         lse);
        return ATTN_OK;
    });
}
