// The MLP's activations, forward and backward, as tinynn::layers::act: SwiGLU (Shazeer 2020)
// silu(gate) * up and GeGLU gelu(gate) * up on gu (N, 2F) = [gate (F) | up (F)] per row into
// a (N, F), and plain GELU (tanh form, Hendrycks & Gimpel 2016, as ggml and GPT-2) elementwise.
// tanh(v) is written 1 - 2 / (e^(2v) + 1) as the CPU layer writes it. One thread an element.
#define SQRT_2_OVER_PI 0.7978846f
#define GELU_C 0.044715f

__device__ __forceinline__ float tanh_as_cpu(float v) { return 1.0f - 2.0f / (expf(2.0f * v) + 1.0f); }

__device__ __forceinline__ float gelu_t(float v) {
    return tanh_as_cpu(SQRT_2_OVER_PI * v * (1.0f + GELU_C * v * v));
}

// gelu'(v) given t = gelu_t(v)
__device__ __forceinline__ float gelu_grad(float v, float t) {
    float dinner = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner;
}

// element i of a (N, F): row i / f, column i % f; its gate at row * 2f + col, its up f later
#define GLU_INDEX                                                                     \
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
    if (i >= n * f) return;                                                           \
    unsigned long long gi = (i / f) * 2 * f + i % f, ui = gi + f;

extern "C" __global__ void swiglu_forward(const float* gu, float* a, unsigned long long n,
                                          unsigned long long f) {
    GLU_INDEX
    float g = gu[gi];
    a[i] = g / (1.0f + expf(-g)) * gu[ui];
}

// dgate = da * up * s * (1 + g (1 - s)), dup = da * silu(g), with s = sigmoid(g)
extern "C" __global__ void swiglu_backward(const float* da, const float* gu, float* dgu,
                                           unsigned long long n, unsigned long long f) {
    GLU_INDEX
    float g = gu[gi], s = 1.0f / (1.0f + expf(-g));
    dgu[ui] = da[i] * (g * s);
    dgu[gi] = da[i] * gu[ui] * s * (1.0f + g * (1.0f - s));
}

extern "C" __global__ void geglu_forward(const float* gu, float* a, unsigned long long n,
                                         unsigned long long f) {
    GLU_INDEX
    float g = gu[gi];
    a[i] = 0.5f * g * (1.0f + gelu_t(g)) * gu[ui];
}

extern "C" __global__ void geglu_backward(const float* da, const float* gu, float* dgu,
                                          unsigned long long n, unsigned long long f) {
    GLU_INDEX
    float g = gu[gi], t = gelu_t(g);
    dgu[ui] = da[i] * 0.5f * g * (1.0f + t);
    dgu[gi] = da[i] * gu[ui] * gelu_grad(g, t);
}

extern "C" __global__ void gelu_forward(const float* x, float* y, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.5f * x[i] * (1.0f + gelu_t(x[i]));
}

// dx = dy * gelu'(x), overwriting dx
extern "C" __global__ void gelu_backward(const float* dy, const float* x, float* dx,
                                         unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dx[i] = dy[i] * gelu_grad(x[i], gelu_t(x[i]));
}
