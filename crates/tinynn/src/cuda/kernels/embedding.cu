// Token embeddings, forward and backward, as tinynn::layers::embedding: out[t] = E[tok[t]]
// (times `scale`, Gemma's sqrt(C)); dE[v] += scale * sum of dout[t] over the positions t whose
// token is v, summed in position order without atomics: the host sorts the positions by token
// (a stable counting sort: `order`, and `starts` of each distinct token in it) and one block
// per distinct token walks its positions in order, one thread per column.
extern "C" __global__ void embedding_forward(const float* table, const int* tokens, float* out,
                                             int t, int c, float scale) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned long long)t * c) return;
    int row = (int)(i / c), col = (int)(i % c);
    out[i] = table[(unsigned long long)tokens[row] * c + col] * scale;
}

// uniq: (m) distinct tokens; starts: (m + 1) offsets into order; order: positions by token
extern "C" __global__ void embedding_backward(const float* dout, const int* uniq, const int* starts,
                                              const int* order, float* dtable, int c, float scale) {
    int u = blockIdx.x;
    float* row = dtable + (unsigned long long)uniq[u] * c;
    for (int col = threadIdx.x; col < c; col += blockDim.x) {
        float acc = 0.0f;
        for (int j = starts[u]; j < starts[u + 1]; ++j) {
            acc += dout[(unsigned long long)order[j] * c + col];
        }
        row[col] += acc * scale;
    }
}
