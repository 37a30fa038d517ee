// Rotary position embedding, forward and backward, as tinynn::layers::rope: the host builds
// the (positions, R/2) cos/sin tables with the CPU's code (so both rotate by the same bits)
// and this turns each head's first R dims: NEOX pairs (k, k + R/2), NORMAL pairs (2k, 2k+1).
// The backward is the same rotation with sign = -1 (by -theta). One thread per (row, head,
// pair): each writes its own two values, no reduction.
// x: (rows, stride) with `heads` heads of `d` dims from the start of each row; pos: (rows)
extern "C" __global__ void rope(float* x, const int* pos, const float* cos_t, const float* sin_t,
                                int rows, int stride, int heads, int d, int half, int neox,
                                float sign) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long n = (unsigned long long)rows * heads * half;
    if (i >= n) return;
    int k = (int)(i % half);
    int h = (int)((i / half) % heads);
    int r = (int)(i / ((unsigned long long)half * heads));
    float* head = x + (unsigned long long)r * stride + (unsigned long long)h * d;
    unsigned long long t = (unsigned long long)pos[r] * half + k;
    float c = cos_t[t], s = sign * sin_t[t];
    int a = neox ? k : 2 * k;
    int b = neox ? k + half : 2 * k + 1;
    float x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
}
