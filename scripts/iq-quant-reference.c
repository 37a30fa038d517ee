// Checksums of ggml's lattice quantizers quantize_iq2_xxs, quantize_iq2_xs, quantize_iq2_s,
// quantize_iq3_xxs and quantize_iq3_s (ggml-quants.c, llama.cpp 0c1e570) on the inputs of
// crates/tinynn/src/quant/iq_quantize_tests.rs: the 24 rows of 1024 values of
// scripts/quant-reference.c (reference_row), and 4 "edge" rows made from its first 4096
// values with all-zero and tiny sub-blocks; each quantized without and with an importance
// matrix (IQ2_XXS and IQ2_XS only with one: ggml asserts it), as llama-quantize calls them,
// after ggml_quantize_init's iq2xs_init_impl / iq3xs_init_impl.
// Built and run by scripts/iq-quant-reference.sh; prints one line per type, input and case.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "ggml.h"
#include "ggml-quants.h"
#include "quant-reference.h"

// the few ggml.c functions ggml-quants.c calls
void ggml_abort(const char * file, int line, const char * fmt, ...) {
    fprintf(stderr, "abort %s:%d %s\n", file, line, fmt); exit(1);
}
static const struct { enum ggml_type t; int blck, size; const char * name; } T[] = {
    {GGML_TYPE_IQ2_XXS, 256, 66, "IQ2_XXS"}, {GGML_TYPE_IQ2_XS, 256, 74, "IQ2_XS"},
    {GGML_TYPE_IQ2_S, 256, 82, "IQ2_S"}, {GGML_TYPE_IQ3_XXS, 256, 98, "IQ3_XXS"},
    {GGML_TYPE_IQ3_S, 256, 110, "IQ3_S"},
};
typedef size_t (*qfn)(const float *, void *, int64_t, int64_t, const float *);
static qfn fn_of(enum ggml_type t) {
    switch (t) {
        case GGML_TYPE_IQ2_XXS: return quantize_iq2_xxs;
        case GGML_TYPE_IQ2_XS: return quantize_iq2_xs;
        case GGML_TYPE_IQ2_S: return quantize_iq2_s;
        case GGML_TYPE_IQ3_XXS: return quantize_iq3_xxs;
        case GGML_TYPE_IQ3_S: return quantize_iq3_s;
        default: exit(3);
    }
}
static int find(enum ggml_type t) { for (int i = 0; i < (int)(sizeof T / sizeof T[0]); i++) if (T[i].t == t) return i; exit(2); }
size_t ggml_type_size(enum ggml_type t) { return T[find(t)].size; }
size_t ggml_row_size(enum ggml_type t, int64_t n) { return T[find(t)].size * n / T[find(t)].blck; }
const char * ggml_type_name(enum ggml_type t) { return T[find(t)].name; }

#define NROW_EDGE 4

int main(void) {
    static float x[NROW * N_PER_ROW], edge[NROW_EDGE * N_PER_ROW], w[N_PER_ROW];
    static uint8_t out[NROW * N_PER_ROW];
    reference_rows(x);
    // edge rows: super-block 3 all zero; of the other sub-blocks of 32, every 7th from the
    // 2nd loses its first 16 values, every 5th from the 2nd is zero, every 5th from the 4th
    // is scaled by 1e-7 (below IQ3_XXS's GROUP_MAX_EPS where the row is small)
    for (int j = 0; j < NROW_EDGE * N_PER_ROW; j++) {
        int sub = j / 32;
        float v = x[j];
        if (j / 256 == 3 || sub % 5 == 1 || (sub % 7 == 2 && j % 32 < 16)) v = 0.0f;
        else if (sub % 5 == 3) v *= 1e-7f;
        edge[j] = v;
    }
    importance(w);
    // ggml_quantize_init for these types
    iq2xs_init_impl(GGML_TYPE_IQ2_XXS);
    iq2xs_init_impl(GGML_TYPE_IQ2_XS);
    iq2xs_init_impl(GGML_TYPE_IQ2_S);
    iq3xs_init_impl(256);
    iq3xs_init_impl(512);
    for (int i = 0; i < (int)(sizeof T / sizeof T[0]); i++) {
        for (int e = 0; e < 2; e++) {
            int needs_w = T[i].t == GGML_TYPE_IQ2_XXS || T[i].t == GGML_TYPE_IQ2_XS;
            for (int with = needs_w; with < 2; with++) {
                size_t n = fn_of(T[i].t)(e ? edge : x, out, e ? NROW_EDGE : NROW, N_PER_ROW, with ? w : NULL);
                printf("%s %s %s 0x%016llx\n", T[i].name, e ? "edge" : "rows", with ? "imatrix" : "none",
                       (unsigned long long) fnv1a(out, n));
            }
        }
    }
    return 0;
}
