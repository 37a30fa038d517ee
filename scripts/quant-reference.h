// The inputs both ggml checksum harnesses (scripts/quant-reference.c, iq-quant-reference.c)
// share with crates/tinynn/src/quant/{reference,weighted}_tests.rs: the xorshift generator,
// FNV-1a, the 24 reference rows of 1024 values and the importance matrix.
#include <math.h>
#include <stdint.h>
#include <stddef.h>

#define N_PER_ROW 1024
#define NROW 24

static uint32_t s;
static uint32_t next_u32(void) { s ^= s << 13; s ^= s >> 17; s ^= s << 5; return s; }
static float next_f32(void) { return (float)(next_u32() >> 8) / (float)(1u << 23) - 1.0f; }
static uint64_t fnv1a(const uint8_t * b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ull; }
    return h;
}

// 96 super-blocks cycling through 6 magnitudes and 8 shapes (reference_tests::reference_row)
static void reference_rows(float * x) {
    const float scales[6] = {1.0f, 0.01f, 100.0f, 0.0001f, 3.0f, 1e-6f};
    s = 0x12345678;
    for (int sb = 0; sb < 96; sb++) {
        float scale = scales[sb % 6];
        for (int i = 0; i < 256; i++) {
            float u = next_f32(), v;
            switch ((sb / 6) % 8) {
                case 0: v = u; break;
                case 1: v = u * u * u; break;
                case 2: v = 2.0f + 0.5f * u; break;
                case 3: v = i % 29 == 0 ? 10.0f * u : 0.1f * u; break;
                case 4: v = i % 3 == 0 ? 0.0f : u; break;
                case 5: v = -1.0f - fabsf(u); break;
                case 6: v = roundf(u * 8.0f) / 8.0f; break;
                default: { float a = next_f32(); float b = next_f32(); v = u + a + b; }
            }
            x[sb * 256 + i] = v * scale;
        }
    }
}

// an importance matrix: mean squares spread over four decades, a few unused columns
// (weighted_tests::importance)
static void importance(float * w) {
    s = 0x9e3779b9;
    for (int j = 0; j < N_PER_ROW; j++) {
        float u = next_f32();
        w[j] = j % 97 == 5 ? 0.0f : powf(10.0f, 2.0f * u) * (1.0f + 0.01f * (j % 7));
    }
}
