// LayerNorm (Ba et al. 2016) forward and backward, as tinynn::layers::layernorm:
// y = scale * ((x - mean) * r * w + b), r = 1 / sqrt(var + eps), saving mean and r per row;
// dx += r (u - mean(u) - xhat mean(u xhat)) with u = dy * w * scale, xhat = (x - mean) r;
// dw += sum over rows of dy * scale * xhat, db += sum of dy * scale. One block per row for the
// row kernels (a fixed tree: the same bits at any grid size); the parameter gradients one
// thread per column summing the rows in order (no atomics).
#define LN_THREADS 256

__device__ float ln_block_sum(float v, float* shared) {
    int t = threadIdx.x;
    shared[t] = v;
    __syncthreads();
    for (int s = LN_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) shared[t] += shared[t + s];
        __syncthreads();
    }
    float r = shared[0];
    __syncthreads();
    return r;
}

// x, y: (rows, c); mean, rstd: (rows). grid (rows), block (LN_THREADS)
extern "C" __global__ void layernorm_forward(const float* x, const float* w, const float* b,
                                             float* y, float* mean, float* rstd, int c,
                                             float eps, float scale) {
    __shared__ float shared[LN_THREADS];
    const float* xr = x + (unsigned long long)blockIdx.x * c;
    float* yr = y + (unsigned long long)blockIdx.x * c;
    float s = 0.0f;
    for (int i = threadIdx.x; i < c; i += LN_THREADS) s += xr[i];
    float mu = ln_block_sum(s, shared) / (float)c;
    float v = 0.0f;
    for (int i = threadIdx.x; i < c; i += LN_THREADS) v += (xr[i] - mu) * (xr[i] - mu);
    float rs = 1.0f / sqrtf(ln_block_sum(v, shared) / (float)c + eps);
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
    for (int i = threadIdx.x; i < c; i += LN_THREADS) yr[i] = scale * ((xr[i] - mu) * rs * w[i] + b[i]);
}

// dx += ... (the residual stream's gradient accumulates). grid (rows), block (LN_THREADS)
extern "C" __global__ void layernorm_backward_x(const float* dy, const float* x, const float* w,
                                                const float* mean, const float* rstd, float* dx,
                                                int c, float scale) {
    __shared__ float shared[LN_THREADS];
    unsigned long long o = (unsigned long long)blockIdx.x * c;
    float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
    float su = 0.0f, sux = 0.0f;
    for (int i = threadIdx.x; i < c; i += LN_THREADS) {
        float u = dy[o + i] * w[i];
        su += u;
        sux += u * (x[o + i] - mu);
    }
    float mu_u = ln_block_sum(su, shared) * scale / (float)c;
    float mu_ux = ln_block_sum(sux, shared) * scale * r / (float)c;
    for (int i = threadIdx.x; i < c; i += LN_THREADS) {
        float xhat = (x[o + i] - mu) * r;
        dx[o + i] += r * (dy[o + i] * w[i] * scale - mu_u - xhat * mu_ux);
    }
}

// dw += sum_rows dy * scale * (x - mean) * r, db += sum_rows dy * scale; one thread a column
extern "C" __global__ void layernorm_backward_wb(const float* dy, const float* x,
                                                 const float* mean, const float* rstd, float* dw,
                                                 float* db, int rows, int c, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c) return;
    float aw = dw[i], ab = db[i];
    for (int r = 0; r < rows; ++r) {
        unsigned long long o = (unsigned long long)r * c + i;
        float gs = dy[o] * scale;
        aw += gs * (x[o] - mean[r]) * rstd[r];
        ab += gs;
    }
    dw[i] = aw;
    db[i] = ab;
}
