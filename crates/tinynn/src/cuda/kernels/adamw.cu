// AdamW, as tinynn::optim::adamw's `update` (the CPU optimizer): per element, with the
// gradient scaled by the clipping factor, m and v updated, then the parameter decayed (decay
// = 1 - lr * wd inside a decay range, 1 outside) and stepped by step * m / (sqrt(v) *
// inv_sqrt_bc2 + eps), step = lr / (1 - beta1^t). The host computes step, inv_sqrt_bc2 and
// the two decays in f64 then f32, as the CPU does; `decay_mask` holds 1 where the element
// decays. One thread per element: no reduction, the same bits at any launch shape.
extern "C" __global__ void adamw_step(float* p, const float* g, float* m, float* v,
                                      const unsigned char* decay_mask, unsigned long long n,
                                      float b1, float b2, float eps, float step,
                                      float inv_sqrt_bc2, float grad_scale, float decay) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float d = decay_mask[i] ? decay : 1.0f;
        p[i] = p[i] * d - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}
