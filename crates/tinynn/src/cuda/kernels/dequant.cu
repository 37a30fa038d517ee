// GGUF weights as stored, on the device (issue 40, "weights as stored"): each type's element
// decoder, a port of tinynn::quant's dequantize_block_* (themselves ggml-quants.c's
// dequantize_row_*, bit for bit), then for every type
//   dequantize_T (w, y, n):             y (n) = the first n elements of w, decoded to f32
//   matmul_T     (w, x, y, rows, cols): y (N, rows) = x (N, cols) W^T, W (rows, cols) as stored,
//                                       N = gridDim.y; one warp per (token, row), f32 sums
// The products decode in f32 and keep the activations in f32: no activation rounding at all
// (the CPU path's two planes round them finer than ggml's one; this rounds them not at all).
// They are the reference and the fallback; int8 decode products (llama.cpp's mmvq) and
// tensor-core prefill come with measurements on a device. Types: F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
//
// The decoders also compile as host C++ (TOY_HOST_CHECK: tinynn's test
// `the_device_decoders_compiled_for_the_host_equal_the_cpu_ones` checks them bit for bit
// against the CPU's on every machine, with or without a GPU); the kernels below them do not.
#define WARP 32

typedef unsigned char u8;

#ifdef TOY_HOST_CHECK
#define __device__
#define __forceinline__ inline
static float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static float f16_at(const u8* p) { _Float16 h; memcpy(&h, p, 2); return (float)h; }
#else
__device__ __forceinline__ float f16_at(const u8* p) {
    unsigned short h = (unsigned short)(p[0] | (p[1] << 8));
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
#endif

__device__ __forceinline__ unsigned int u32_at(const u8* p) {
    return p[0] | (p[1] << 8) | (p[2] << 16) | ((unsigned int)p[3] << 24);
}

// element i of one block of each type (b points at the block)
__device__ __forceinline__ float el_f16(const u8* b, int i) { return f16_at(b + 2 * i); }

__device__ __forceinline__ float el_bf16(const u8* b, int i) {
    return __uint_as_float((unsigned int)(b[2 * i] | (b[2 * i + 1] << 8)) << 16);
}

__device__ __forceinline__ int nib(const u8* q, int i) { return i < 16 ? q[i] & 15 : q[i - 16] >> 4; }

__device__ __forceinline__ float el_q4_0(const u8* b, int i) {
    return (float)(nib(b + 2, i) - 8) * f16_at(b);
}

__device__ __forceinline__ float el_q4_1(const u8* b, int i) {
    return (float)nib(b + 4, i) * f16_at(b) + f16_at(b + 2);
}

// Q5's fifth bit of element i: bit i of the little-endian qh
__device__ __forceinline__ int fifth(const u8* qh, int i) { return ((u32_at(qh) >> i) & 1) << 4; }

__device__ __forceinline__ float el_q5_0(const u8* b, int i) {
    return (float)((nib(b + 6, i) | fifth(b + 2, i)) - 16) * f16_at(b);
}

__device__ __forceinline__ float el_q5_1(const u8* b, int i) {
    return (float)(nib(b + 8, i) | fifth(b + 4, i)) * f16_at(b) + f16_at(b + 2);
}

__device__ __forceinline__ float el_q8_0(const u8* b, int i) {
    return (float)(signed char)b[2 + i] * f16_at(b);
}

// Q4_K / Q5_K: sub-block j's 6-bit scale and min from the packed 12 bytes
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q4_K: each 64 elements are 32 bytes, low nibbles (sub-block 2c) then high (2c + 1)
__device__ __forceinline__ float el_q4_k(const u8* b, int i) {
    int c = i / 64, w = i % 64, l = w % 32, sc, m;
    scale_min_k4(2 * c + (w >= 32), b + 4, &sc, &m);
    u8 q = b[16 + 32 * c + l];
    int v = w < 32 ? q & 15 : q >> 4;
    return f16_at(b) * (float)sc * (float)v - f16_at(b + 2) * (float)m;
}

// Q5_K: as Q4_K plus fifth bits, bits 2c and 2c + 1 of qh[l]
__device__ __forceinline__ float el_q5_k(const u8* b, int i) {
    int c = i / 64, w = i % 64, l = w % 32, sc, m;
    scale_min_k4(2 * c + (w >= 32), b + 4, &sc, &m);
    u8 q = b[48 + 32 * c + l];
    int hi = (b[16 + l] >> (2 * c + (w >= 32))) & 1;
    int v = (w < 32 ? q & 15 : q >> 4) + 16 * hi;
    return f16_at(b) * (float)sc * (float)v - f16_at(b + 2) * (float)m;
}

// Q6_K: per 128 elements 64 bytes of low nibbles, 32 of 2-bit highs, 8 scales; quarter k of
// the 128 takes nibble k / 2 of ql[l + 32 (k % 2)] and bits 2k of qh[l]
__device__ __forceinline__ float el_q6_k(const u8* b, int i) {
    int n = i / 128, w = i % 128, k = w / 32, l = w % 32;
    const u8* ql = b + 64 * n;
    u8 h = b[128 + 32 * n + l];
    u8 lo = ql[l + 32 * (k % 2)];
    int q = ((k < 2 ? lo & 15 : lo >> 4) | (((h >> (2 * k)) & 3) << 4)) - 32;
    signed char sc = (signed char)b[192 + 8 * n + l / 16 + 2 * k];
    return f16_at(b + 208) * (float)sc * (float)q;
}

#ifndef TOY_HOST_CHECK
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#define WEIGHT_TYPE(NAME, QK, BYTES)                                                          \
    extern "C" __global__ void dequantize_##NAME(const u8* w, float* y, unsigned long long n) { \
        unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;     \
        if (i < n) y[i] = el_##NAME(w + (i / QK) * BYTES, (int)(i % QK));                    \
    }                                                                                         \
    extern "C" __global__ void matmul_##NAME(const u8* w, const float* x, float* y, int rows, \
                                             int cols) {                                      \
        int r = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP; \
        if (r >= rows) return;                                                                \
        const u8* wr = w + (unsigned long long)r * (cols / QK) * BYTES;                       \
        const float* xr = x + (unsigned long long)blockIdx.y * cols;                          \
        float acc = 0.0f;                                                                     \
        for (int i = lane; i < cols; i += WARP) acc += el_##NAME(wr + (i / QK) * BYTES, i % QK) * xr[i]; \
        acc = warp_sum(acc);                                                                  \
        if (lane == 0) y[(unsigned long long)blockIdx.y * rows + r] = acc;                    \
    }

WEIGHT_TYPE(f16, 1, 2)
WEIGHT_TYPE(bf16, 1, 2)
WEIGHT_TYPE(q4_0, 32, 18)
WEIGHT_TYPE(q4_1, 32, 20)
WEIGHT_TYPE(q5_0, 32, 22)
WEIGHT_TYPE(q5_1, 32, 24)
WEIGHT_TYPE(q8_0, 32, 34)
WEIGHT_TYPE(q4_k, 256, 144)
WEIGHT_TYPE(q5_k, 256, 176)
WEIGHT_TYPE(q6_k, 256, 210)
#endif
