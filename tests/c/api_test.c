/* The public header is plain C99: this program includes it, creates a context, runs the
 * three-token example of "Attention and Self-Attention" (section D) through attn_sdpa_f32
 * and checks an error path. Exit status 0 on success. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn/attn.h"

static int failures = 0;

static void expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "FAILED: %s\n", what);
        ++failures;
    }
}

int main(void) {
    /* Q = K = [[1,0],[0,1],[1,1]], V = [[1,0],[0,2],[3,1]], d_k = 2 */
    const float q[6] = {1, 0, 0, 1, 1, 1};
    const float v[6] = {1, 0, 0, 2, 3, 1};
    const float want[6] = {1.6044f, 0.7967f, 1.4011f, 1.2033f, 1.7587f, 1.0000f};
    float out[6];
    attn_config cfg;
    attn_context *ctx = NULL;
    attn_sdpa_desc d;
    attn_status s;
    int i;

    expect(strcmp(attn_version(), "0.3.0") == 0, "attn_version() == \"0.3.0\"");

    attn_config_init(&cfg);
    s = attn_context_create(&cfg, &ctx);
    expect(s == ATTN_OK && ctx != NULL, "attn_context_create with defaults");
    if (!ctx) return 1;
    printf("context: isa %s, %d threads\n", attn_context_isa(ctx), attn_context_num_threads(ctx));

    attn_sdpa_desc_init(&d, 1, 1, 3, 3, 2);
    for (i = 0; i < 6; ++i) out[i] = -1.0f;
    s = attn_sdpa_f32(ctx, &d, q, q, v, out);
    expect(s == ATTN_OK, "attn_sdpa_f32 on the seed example returns ATTN_OK");
    if (s != ATTN_OK) fprintf(stderr, "  %s\n", attn_last_error());
    for (i = 0; i < 6; ++i) {
        if (!(fabsf(out[i] - want[i]) <= 1e-4f)) {
            fprintf(stderr, "  out[%d] = %.6f, want %.4f\n", i, out[i], want[i]);
            expect(0, "attention output matches the seed to 1e-4");
        }
    }

    /* The same call through the default context (NULL) gives the same numbers. */
    {
        float out_default[6];
        s = attn_sdpa_f32(NULL, &d, q, q, v, out_default);
        expect(s == ATTN_OK, "attn_sdpa_f32 with the default context");
        for (i = 0; i < 6; ++i)
            expect(fabsf(out_default[i] - want[i]) <= 1e-4f, "default context output");
    }

    /* An error path: a negative length is rejected, named, and nothing is written. */
    d.len_q = -3;
    for (i = 0; i < 6; ++i) out[i] = 42.0f;
    s = attn_sdpa_f32(ctx, &d, q, q, v, out);
    expect(s == ATTN_INVALID_ARGUMENT, "len_q = -3 gives ATTN_INVALID_ARGUMENT");
    expect(strcmp(attn_last_error(), "attn_sdpa_f32: desc->len_q = -3, must be >= 1") == 0,
           "the message names the function, the argument, the value and the rule");
    for (i = 0; i < 6; ++i) expect(out[i] == 42.0f, "out untouched after a rejected call");
    expect(strcmp(attn_status_string(ATTN_INVALID_ARGUMENT), attn_status_string(ATTN_OK)) != 0,
           "distinct status strings");

    attn_context_destroy(ctx);
    attn_context_destroy(NULL);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all C API checks passed\n");
    return 0;
}
