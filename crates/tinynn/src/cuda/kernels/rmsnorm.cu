// RMSNorm forward and backward, as tinynn::layers::rmsnorm: y = x * rstd * scale * w with
// rstd = 1 / sqrt(mean(x^2) + eps); dx += rstd * scale * dy * w - rstd^3 * x * mean(dy * w * x)
// * scale; dw += sum over rows of dy * x * rstd * scale. One block per row for the row
// kernels (a fixed tree over the block: the same bits at any grid size); the weight gradient
// is one thread per column summing the rows in order (no atomics).
#define RMS_THREADS 256

__device__ float block_sum(float v, float* shared) {
    int t = threadIdx.x;
    shared[t] = v;
    __syncthreads();
    for (int s = RMS_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) shared[t] += shared[t + s];
        __syncthreads();
    }
    float r = shared[0];
    __syncthreads();
    return r;
}

// x, y: (rows, c); rstd: (rows)
extern "C" __global__ void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd,
                                           int c, float eps, float scale) {
    __shared__ float shared[RMS_THREADS];
    const float* xr = x + (unsigned long long)blockIdx.x * c;
    float* yr = y + (unsigned long long)blockIdx.x * c;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < c; i += RMS_THREADS) ss += xr[i] * xr[i];
    ss = block_sum(ss, shared);
    float rs = 1.0f / sqrtf(ss / (float)c + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
    float k = rs * scale;
    for (int i = threadIdx.x; i < c; i += RMS_THREADS) yr[i] = xr[i] * k * w[i];
}

// dx += ... (the residual stream's gradient accumulates)
extern "C" __global__ void rmsnorm_backward_x(const float* dy, const float* x, const float* w,
                                              const float* rstd, float* dx, int c, float scale) {
    __shared__ float shared[RMS_THREADS];
    unsigned long long o = (unsigned long long)blockIdx.x * c;
    float ux = 0.0f;
    for (int i = threadIdx.x; i < c; i += RMS_THREADS) ux += dy[o + i] * w[i] * x[o + i];
    ux = block_sum(ux, shared) * scale;
    float r = rstd[blockIdx.x];
    float k = r * r * r * ux / (float)c;
    float rs = r * scale;
    for (int i = threadIdx.x; i < c; i += RMS_THREADS) dx[o + i] += rs * dy[o + i] * w[i] - k * x[o + i];
}

// dw += sum_rows dy * x * rstd * scale, one thread per column
extern "C" __global__ void rmsnorm_backward_w(const float* dy, const float* x, const float* rstd,
                                              float* dw, int rows, int c, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c) return;
    float acc = dw[i];
    for (int r = 0; r < rows; ++r) {
        unsigned long long o = (unsigned long long)r * c + i;
        acc += dy[o] * x[o] * (rstd[r] * scale);
    }
    dw[i] = acc;
}
