// Elementwise pieces of a training step, each as its tinynn layer: f32 <-> bf16 casts (round to nearest even, as
// quant::float::f32_to_bf16), and the gradient norm's sum of squares (optim::clip) in two
// deterministic passes: per-block partial sums in a fixed tree, then one block over them.
// bf16 as its 16 bits (no header needed): round to nearest even, NaN kept quiet
extern "C" __global__ void f32_to_bf16(const float* x, unsigned short* y, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int b = __float_as_uint(x[i]);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        y[i] = (unsigned short)((b >> 16) | 0x40u);
    } else {
        y[i] = (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}

extern "C" __global__ void bf16_to_f32(const unsigned short* x, float* y, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __uint_as_float(((unsigned int)x[i]) << 16);
}

#define SS_THREADS 256

// partial[b] = sum of x[i]^2 over block b's grid-stride share, in a fixed tree
extern "C" __global__ void sum_sq_partial(const float* x, float* partial, unsigned long long n) {
    __shared__ float shared[SS_THREADS];
    unsigned long long i = (unsigned long long)blockIdx.x * SS_THREADS + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * SS_THREADS;
    float acc = 0.0f;
    for (; i < n; i += stride) acc += x[i] * x[i];
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int s = SS_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

// out[0] = sum of partial[0..m] in a fixed tree (one block)
extern "C" __global__ void sum_partials(const float* partial, float* out, int m) {
    __shared__ float shared[SS_THREADS];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < m; i += SS_THREADS) acc += partial[i];
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int s = SS_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = shared[0];
}
