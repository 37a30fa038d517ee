// Causal self-attention with grouped-query heads, forward and backward, as
// tinynn::layers::attention (FlashAttention, Dao et al. 2022: an online softmax over the keys,
// only each query row's log-sum-exp kept; the backward recomputes the probabilities from it).
// Layout as the CPU layer: qkv (B*T, S) with S = (H + 2 Hkv) D (query heads, then key heads,
// then value heads), out (B*T, H*D), lse (B, H, T) natural, of the scaled scores. Query head h
// reads kv head h / (H / Hkv). `pos` (B*T, or null) cuts a sequence into samples (a row's
// position inside its sample: it sees keys from row - pos[row] on); `window` > 0 keeps the last
// `window` keys (Gemma 3's local layers); `causal` 0 lets every row see the whole sequence.
//
// One warp per (query row, head) in the forward and in dQ; one warp per (key row, kv head) in
// dK/dV, which walks the query heads of its group and their rows in order: every sum has one
// fixed order (warp shuffles in a fixed tree, no atomics), so a run repeats bit for bit.
#define WARP 32
#define MAX_E 8 // head sizes up to 256 = 8 elements a lane

struct Shape {
    int t, h, hkv, d;
    int causal, window;
    float scale;
};

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ int width(const Shape& s) { return (s.h + 2 * s.hkv) * s.d; }

// The first key row (inside the sequence) that query row i sees.
__device__ __forceinline__ int first_key(const Shape& s, const int* pos, int seq, int i) {
    if (!s.causal) return 0;
    int lo = pos ? i - pos[seq * s.t + i] : 0;
    if (s.window > 0 && i - s.window + 1 > lo) lo = i - s.window + 1;
    return lo;
}

// The key rows query i sees are first_key .. last_key - 1.
__device__ __forceinline__ int last_key(const Shape& s, int i) { return s.causal ? i + 1 : s.t; }

// Does query row i see key row j?
__device__ __forceinline__ bool sees(const Shape& s, const int* pos, int seq, int i, int j) {
    return j >= first_key(s, pos, seq, i) && j < last_key(s, i);
}

// Load D elements of a row, lane-strided: element lane + 32 e.
__device__ __forceinline__ void load(const float* row, int d, float* x) {
    int lane = threadIdx.x % WARP;
#pragma unroll
    for (int e = 0; e < MAX_E; ++e) x[e] = lane + WARP * e < d ? row[lane + WARP * e] : 0.0f;
}

__device__ __forceinline__ float dot(const float* x, const float* row, int d) {
    int lane = threadIdx.x % WARP;
    float acc = 0.0f;
#pragma unroll
    for (int e = 0; e < MAX_E; ++e)
        if (lane + WARP * e < d) acc += x[e] * row[lane + WARP * e];
    return warp_sum(acc);
}

// grid (ceil(T / warps), H, B), block (32 * warps)
extern "C" __global__ void attention_forward(const float* qkv, float* out, float* lse,
                                             const int* pos, Shape s) {
    int i = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int h = blockIdx.y, seq = blockIdx.z, lane = threadIdx.x % WARP;
    if (i >= s.t) return;
    int w = width(s), g = h / (s.h / s.hkv);
    const float* base = qkv + (unsigned long long)seq * s.t * w;
    float q[MAX_E], acc[MAX_E];
    load(base + (unsigned long long)i * w + h * s.d, s.d, q);
#pragma unroll
    for (int e = 0; e < MAX_E; ++e) acc[e] = 0.0f;
    float m = -__int_as_float(0x7f800000), l = 0.0f; // -inf (NVRTC has no math.h)
    int ko = (s.h + g) * s.d, vo = (s.h + s.hkv + g) * s.d;
    for (int j = first_key(s, pos, seq, i); j < last_key(s, i); ++j) {
        const float* kr = base + (unsigned long long)j * w;
        float x = dot(q, kr + ko, s.d) * s.scale;
        float mn = fmaxf(m, x);
        float c = expf(m - mn), p = expf(x - mn);
        l = l * c + p;
#pragma unroll
        for (int e = 0; e < MAX_E; ++e)
            if (lane + WARP * e < s.d) acc[e] = acc[e] * c + p * kr[vo + lane + WARP * e];
        m = mn;
    }
    float inv = 1.0f / l;
    float* o = out + ((unsigned long long)seq * s.t + i) * s.h * s.d + h * s.d;
#pragma unroll
    for (int e = 0; e < MAX_E; ++e)
        if (lane + WARP * e < s.d) o[lane + WARP * e] = acc[e] * inv;
    if (lane == 0) lse[((unsigned long long)seq * s.h + h) * s.t + i] = m + logf(l);
}

// di (B, H, T) = dout_i . out_i, the softmax backward's row term. Same grid as the forward.
extern "C" __global__ void attention_backward_di(const float* dout, const float* out, float* di,
                                                 Shape s) {
    int i = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int h = blockIdx.y, seq = blockIdx.z;
    if (i >= s.t) return;
    unsigned long long r = ((unsigned long long)seq * s.t + i) * s.h * s.d + h * s.d;
    float x[MAX_E];
    load(dout + r, s.d, x);
    float v = dot(x, out + r, s.d);
    if (threadIdx.x % WARP == 0) di[((unsigned long long)seq * s.h + h) * s.t + i] = v;
}

// dq_i = scale * sum_j p_ij (dout_i . v_j - di_i) k_j, written into dqkv's query columns.
// Same grid as the forward.
extern "C" __global__ void attention_backward_dq(const float* dout, const float* qkv,
                                                 const float* lse, const float* di, float* dqkv,
                                                 const int* pos, Shape s) {
    int i = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int h = blockIdx.y, seq = blockIdx.z, lane = threadIdx.x % WARP;
    if (i >= s.t) return;
    int w = width(s), g = h / (s.h / s.hkv);
    const float* base = qkv + (unsigned long long)seq * s.t * w;
    float q[MAX_E], go[MAX_E], acc[MAX_E];
    load(base + (unsigned long long)i * w + h * s.d, s.d, q);
    load(dout + ((unsigned long long)seq * s.t + i) * s.h * s.d + h * s.d, s.d, go);
#pragma unroll
    for (int e = 0; e < MAX_E; ++e) acc[e] = 0.0f;
    unsigned long long li = ((unsigned long long)seq * s.h + h) * s.t + i;
    float l = lse[li], dd = di[li];
    int ko = (s.h + g) * s.d, vo = (s.h + s.hkv + g) * s.d;
    for (int j = first_key(s, pos, seq, i); j < last_key(s, i); ++j) {
        const float* kr = base + (unsigned long long)j * w;
        float p = expf(dot(q, kr + ko, s.d) * s.scale - l);
        float ds = p * (dot(go, kr + vo, s.d) - dd);
#pragma unroll
        for (int e = 0; e < MAX_E; ++e)
            if (lane + WARP * e < s.d) acc[e] += ds * kr[ko + lane + WARP * e];
    }
    float* o = dqkv + ((unsigned long long)seq * s.t + i) * w + h * s.d;
#pragma unroll
    for (int e = 0; e < MAX_E; ++e)
        if (lane + WARP * e < s.d) o[lane + WARP * e] = acc[e] * s.scale;
}

// dk_j = scale * sum over the group's heads and rows i that see j of ds_ij q_i, dv_j = sum of
// p_ij dout_i; written into dqkv's key and value columns. grid (ceil(T / warps), Hkv, B).
extern "C" __global__ void attention_backward_dkv(const float* dout, const float* qkv,
                                                  const float* lse, const float* di, float* dqkv,
                                                  const int* pos, Shape s) {
    int j = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int g = blockIdx.y, seq = blockIdx.z, lane = threadIdx.x % WARP;
    if (j >= s.t) return;
    int w = width(s), rep = s.h / s.hkv;
    int ko = (s.h + g) * s.d, vo = (s.h + s.hkv + g) * s.d;
    const float* base = qkv + (unsigned long long)seq * s.t * w;
    float k[MAX_E], v[MAX_E], dk[MAX_E], dv[MAX_E];
    load(base + (unsigned long long)j * w + ko, s.d, k);
    load(base + (unsigned long long)j * w + vo, s.d, v);
#pragma unroll
    for (int e = 0; e < MAX_E; ++e) dk[e] = dv[e] = 0.0f;
    // the rows that can see j: from j (causal) or 0, to the sample's end, the window's end or T
    int lo = s.causal ? j : 0, hi = s.t;
    if (s.causal && s.window > 0 && j + s.window < hi) hi = j + s.window;
    for (int h = g * rep; h < (g + 1) * rep; ++h) {
        for (int i = lo; i < hi; ++i) {
            if (s.causal && pos && i > j && pos[seq * s.t + i] == 0) break; // next sample
            if (!sees(s, pos, seq, i, j)) continue;
            const float* qr = base + (unsigned long long)i * w + h * s.d;
            const float* gr = dout + ((unsigned long long)seq * s.t + i) * s.h * s.d + h * s.d;
            unsigned long long li = ((unsigned long long)seq * s.h + h) * s.t + i;
            float p = expf(dot(k, qr, s.d) * s.scale - lse[li]);
            float ds = p * (dot(v, gr, s.d) - di[li]);
#pragma unroll
            for (int e = 0; e < MAX_E; ++e) {
                if (lane + WARP * e < s.d) {
                    dv[e] += p * gr[lane + WARP * e];
                    dk[e] += ds * qr[lane + WARP * e];
                }
            }
        }
    }
    float* o = dqkv + ((unsigned long long)seq * s.t + j) * w;
#pragma unroll
    for (int e = 0; e < MAX_E; ++e) {
        if (lane + WARP * e < s.d) {
            o[ko + lane + WARP * e] = dk[e] * s.scale;
            o[vo + lane + WARP * e] = dv[e];
        }
    }
}
