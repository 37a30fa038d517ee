// Softmax cross-entropy with ignored targets, forward and backward fused, as
// tinynn::layers::cross_entropy: per row of logits (V), loss = logsumexp - logit[target];
// dlogits = (softmax - onehot(target)) * inv_n, inv_n = 1 / (rows whose target is not
// ignored); a row whose target is negative (ignored) gets zero loss and zero gradient.
// One block per row, fixed reduction trees; the mean loss is summed by the host (or a second
// pass) in row order.
#define XE_THREADS 256

__device__ float block_reduce(float v, float* shared, bool is_max) {
    int t = threadIdx.x;
    shared[t] = v;
    __syncthreads();
    for (int s = XE_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) shared[t] = is_max ? fmaxf(shared[t], shared[t + s]) : shared[t] + shared[t + s];
        __syncthreads();
    }
    float r = shared[0];
    __syncthreads();
    return r;
}

// logits, dlogits: (rows, v); targets: (rows), negative = ignored; loss: (rows)
extern "C" __global__ void cross_entropy(const float* logits, const int* targets, float* loss,
                                         float* dlogits, int v, float inv_n) {
    __shared__ float shared[XE_THREADS];
    unsigned long long o = (unsigned long long)blockIdx.x * v;
    int target = targets[blockIdx.x];
    if (target < 0) {
        for (int i = threadIdx.x; i < v; i += XE_THREADS) dlogits[o + i] = 0.0f;
        if (threadIdx.x == 0) loss[blockIdx.x] = 0.0f;
        return;
    }
    float mx = __int_as_float(0xff800000);  // -inf
    for (int i = threadIdx.x; i < v; i += XE_THREADS) mx = fmaxf(mx, logits[o + i]);
    mx = block_reduce(mx, shared, true);
    float se = 0.0f;
    for (int i = threadIdx.x; i < v; i += XE_THREADS) se += expf(logits[o + i] - mx);
    se = block_reduce(se, shared, false);
    float lse = mx + logf(se);
    if (threadIdx.x == 0) loss[blockIdx.x] = lse - logits[o + target];
    for (int i = threadIdx.x; i < v; i += XE_THREADS) {
        float p = expf(logits[o + i] - lse);
        dlogits[o + i] = (p - (i == target ? 1.0f : 0.0f)) * inv_n;
    }
}
