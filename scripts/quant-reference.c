// Checksums of ggml's row quantizers (ggml-quants.c, llama.cpp 0c1e570) on the inputs of
// crates/tinynn/src/quant/weighted_tests.rs: 24 rows of 1024 values (reference_row), each
// type quantized once without and once with an importance matrix (a weight per column), as
// llama-quantize calls them (`quantize_<type>(src, dst, nrow, n_per_row, imatrix)`).
// Built and run by scripts/quant-reference.sh; prints one line per type and case.
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
    {GGML_TYPE_Q4_0, 32, 18, "Q4_0"}, {GGML_TYPE_Q4_1, 32, 20, "Q4_1"},
    {GGML_TYPE_Q5_0, 32, 22, "Q5_0"}, {GGML_TYPE_Q5_1, 32, 24, "Q5_1"},
    {GGML_TYPE_Q8_0, 32, 34, "Q8_0"},
    {GGML_TYPE_Q2_K, 256, 84, "Q2_K"}, {GGML_TYPE_Q3_K, 256, 110, "Q3_K"},
    {GGML_TYPE_Q4_K, 256, 144, "Q4_K"}, {GGML_TYPE_Q5_K, 256, 176, "Q5_K"},
    {GGML_TYPE_Q6_K, 256, 210, "Q6_K"},
    {GGML_TYPE_IQ4_NL, 32, 18, "IQ4_NL"}, {GGML_TYPE_IQ4_XS, 256, 136, "IQ4_XS"},
};
typedef size_t (*qfn)(const float *, void *, int64_t, int64_t, const float *);
static qfn fn_of(enum ggml_type t) {
    switch (t) {
        case GGML_TYPE_Q4_0: return quantize_q4_0;
        case GGML_TYPE_Q4_1: return quantize_q4_1;
        case GGML_TYPE_Q5_0: return quantize_q5_0;
        case GGML_TYPE_Q5_1: return quantize_q5_1;
        case GGML_TYPE_Q8_0: return quantize_q8_0;
        case GGML_TYPE_Q2_K: return quantize_q2_K;
        case GGML_TYPE_Q3_K: return quantize_q3_K;
        case GGML_TYPE_Q4_K: return quantize_q4_K;
        case GGML_TYPE_Q5_K: return quantize_q5_K;
        case GGML_TYPE_Q6_K: return quantize_q6_K;
        case GGML_TYPE_IQ4_NL: return quantize_iq4_nl;
        case GGML_TYPE_IQ4_XS: return quantize_iq4_xs;
        default: exit(3);
    }
}
static int find(enum ggml_type t) { for (int i = 0; i < (int)(sizeof T / sizeof T[0]); i++) if (T[i].t == t) return i; exit(2); }
size_t ggml_type_size(enum ggml_type t) { return T[find(t)].size; }
size_t ggml_row_size(enum ggml_type t, int64_t n) { return T[find(t)].size * n / T[find(t)].blck; }
const char * ggml_type_name(enum ggml_type t) { return T[find(t)].name; }


int main(void) {
    static float x[NROW * N_PER_ROW], w[N_PER_ROW];
    static uint8_t out[NROW * N_PER_ROW * 2];
    reference_rows(x);
    importance(w);
    // the lattice types' decoders: 64 blocks of random bytes each (the f16 scale kept finite)
    static const struct { enum ggml_type t; int size; const char * name; } D[] = {
        {GGML_TYPE_IQ2_XXS, 66, "IQ2_XXS"}, {GGML_TYPE_IQ2_XS, 74, "IQ2_XS"}, {GGML_TYPE_IQ2_S, 82, "IQ2_S"},
        {GGML_TYPE_IQ3_XXS, 98, "IQ3_XXS"}, {GGML_TYPE_IQ3_S, 110, "IQ3_S"}, {GGML_TYPE_IQ1_S, 50, "IQ1_S"},
        {GGML_TYPE_IQ1_M, 56, "IQ1_M"},
    };
    static uint8_t blocks[64 * 110];
    static float y[64 * 256];
    for (int i = 0; i < (int)(sizeof D / sizeof D[0]); i++) {
        s = 0x51ed0000u + (uint32_t)D[i].t;
        for (int j = 0; j < 64 * D[i].size; j++) blocks[j] = (uint8_t)(next_u32() >> 11);
        for (int b = 0; b < 64; b++) {
            if (D[i].t == GGML_TYPE_IQ1_M) blocks[b * 56 + 55] &= 0xbf; else blocks[b * D[i].size + 1] &= 0xbb;
        }
        switch (D[i].t) {
            case GGML_TYPE_IQ2_XXS: dequantize_row_iq2_xxs((void *)blocks, y, 64 * 256); break;
            case GGML_TYPE_IQ2_XS: dequantize_row_iq2_xs((void *)blocks, y, 64 * 256); break;
            case GGML_TYPE_IQ2_S: dequantize_row_iq2_s((void *)blocks, y, 64 * 256); break;
            case GGML_TYPE_IQ3_XXS: dequantize_row_iq3_xxs((void *)blocks, y, 64 * 256); break;
            case GGML_TYPE_IQ3_S: dequantize_row_iq3_s((void *)blocks, y, 64 * 256); break;
            case GGML_TYPE_IQ1_S: dequantize_row_iq1_s((void *)blocks, y, 64 * 256); break;
            default: dequantize_row_iq1_m((void *)blocks, y, 64 * 256); break;
        }
        printf("dequantize %s 0x%016llx\n", D[i].name, (unsigned long long) fnv1a((const uint8_t *)y, sizeof y));
    }
    for (int i = 0; i < (int)(sizeof T / sizeof T[0]); i++) {
        for (int with = 0; with < 2; with++) {
            size_t n = fn_of(T[i].t)(x, out, NROW, N_PER_ROW, with ? w : NULL);
            printf("%s %s 0x%016llx\n", T[i].name, with ? "imatrix" : "none", (unsigned long long) fnv1a(out, n));
        }
    }
    return 0;
}
