// Records what llama.cpp 0c1e570's samplers (src/llama-sampler.cpp) keep, and with which
// probabilities, on fixed logit vectors: the reference crates/toy/tests/samplers_llama.rs
// checks toy's samplers against. Built and run by scripts/sampler-reference.sh; argv[1] is
// a GGUF whose vocabulary DRY's sequence breakers are matched against (SmolLM2's).
//
// Every case is a chain of llama.cpp samplers applied to one logit vector; the output is the
// entries left with a finite logit and their softmax, largest first (ties: lower id first).
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// The logit generators the Rust test repeats bit for bit (xorshift64*).
static uint64_t next(uint64_t & s) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
}

static std::vector<float> generate(const std::string & kind, size_t n, uint64_t seed) {
    std::vector<float> v(n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (auto & x : v) {
        uint64_t r = next(s);
        float u = (float) ((r >> 40) & 0xFFFFFF) / 16777216.0f;
        if (kind == "uniform") x = u * 20.0f - 10.0f;
        else if (kind == "ties") x = (float) ((r >> 40) % 16) * 0.5f;
        else if (kind == "peaked") x = -u * u * 30.0f;
        else x = 0.0f;  // "zeros"
    }
    return v;
}

struct Stage {
    std::string name;
    std::vector<std::pair<std::string, double>> params;
    double get(const char * k) const {
        for (auto & p : params) if (p.first == k) return p.second;
        return 0.0;
    }
};

struct Case {
    std::string name;
    std::vector<float> logits;  // given, or empty when generated
    std::string gen;
    size_t n = 0;
    uint64_t seed = 0;
    std::vector<int> history;
    std::vector<Stage> stages;
    std::vector<std::string> breakers;  // DRY's, when it is a stage
};

static llama_sampler * make(const Stage & st, const Case & c, const llama_vocab * vocab, int n_vocab) {
    const std::string & n = st.name;
    if (n == "top_k") return llama_sampler_init_top_k((int) st.get("k"));
    if (n == "top_p") return llama_sampler_init_top_p(st.get("p"), 0);
    if (n == "min_p") return llama_sampler_init_min_p(st.get("p"), 0);
    if (n == "typ_p") return llama_sampler_init_typical(st.get("p"), 0);
    if (n == "top_n_sigma") return llama_sampler_init_top_n_sigma(st.get("n"));
    if (n == "xtc") return llama_sampler_init_xtc(1.0f, st.get("threshold"), 0, 7);
    if (n == "temperature") return llama_sampler_init_temp_ext(st.get("t"), st.get("range"), st.get("exponent"));
    if (n == "penalties")
        return llama_sampler_init_penalties(n_vocab, (int) st.get("last_n"), st.get("repeat"), st.get("freq"), st.get("present"));
    if (n == "dry") {
        std::vector<const char *> b;
        for (auto & s : c.breakers) b.push_back(s.c_str());
        return llama_sampler_init_dry(vocab, st.get("multiplier"), st.get("base"), (int) st.get("allowed_length"),
                                      (int) st.get("last_n"), b.data(), b.size());
    }
    fprintf(stderr, "unknown stage %s\n", n.c_str());
    exit(1);
}

static void run(const Case & c, const llama_vocab * vocab, bool first) {
    std::vector<float> logits = c.logits.empty() ? generate(c.gen, c.n, c.seed) : c.logits;
    const int n_vocab = (int) logits.size();
    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    for (auto & st : c.stages) llama_sampler_chain_add(chain, make(st, c, vocab, n_vocab));
    for (int t : c.history) llama_sampler_accept(chain, t);
    std::vector<llama_token_data> data(n_vocab);
    for (int i = 0; i < n_vocab; i++) data[i] = {i, logits[i], 0.0f};
    llama_token_data_array arr = {data.data(), data.size(), -1, false};
    llama_sampler_apply(chain, &arr);
    // the finite entries left, their softmax in double, largest first
    std::vector<std::pair<int, double>> kept;
    double mx = -INFINITY;
    for (size_t i = 0; i < arr.size; i++) if (std::isfinite(arr.data[i].logit)) mx = std::max(mx, (double) arr.data[i].logit);
    double z = 0;
    for (size_t i = 0; i < arr.size; i++) {
        if (!std::isfinite(arr.data[i].logit)) continue;
        double e = std::exp((double) arr.data[i].logit - mx);
        kept.push_back({arr.data[i].id, e});
        z += e;
    }
    for (auto & k : kept) k.second /= z;
    std::sort(kept.begin(), kept.end(), [](auto & a, auto & b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
    uint64_t hash = 1469598103934665603ULL;  // FNV-1a over the kept ids in increasing order
    std::vector<int> ids;
    for (auto & k : kept) ids.push_back(k.first);
    std::sort(ids.begin(), ids.end());
    for (int id : ids) { hash ^= (uint64_t) id; hash *= 1099511628211ULL; }

    printf("%s  {\"name\": \"%s\", ", first ? "" : ",\n", c.name.c_str());
    if (c.logits.empty()) {
        printf("\"gen\": \"%s\", \"n\": %zu, \"seed\": %llu, ", c.gen.c_str(), c.n, (unsigned long long) c.seed);
    } else {
        printf("\"logits\": [");
        for (size_t i = 0; i < c.logits.size(); i++)
            std::isfinite(c.logits[i]) ? printf("%s%.9g", i ? ", " : "", c.logits[i]) : printf("%snull", i ? ", " : "");
        printf("], ");
    }
    printf("\"history\": [");
    for (size_t i = 0; i < c.history.size(); i++) printf("%s%d", i ? ", " : "", c.history[i]);
    printf("], \"breakers\": [");
    for (size_t i = 0; i < c.breakers.size(); i++) {
        std::string e;
        for (char ch : c.breakers[i]) e += ch == '\n' ? std::string("\\n") : ch == '"' ? std::string("\\\"") : std::string(1, ch);
        printf("%s\"%s\"", i ? ", " : "", e.c_str());
    }
    printf("],\n    \"stages\": [");
    for (size_t i = 0; i < c.stages.size(); i++) {
        printf("%s{\"name\": \"%s\"", i ? ", " : "", c.stages[i].name.c_str());
        for (auto & p : c.stages[i].params) printf(", \"%s\": %.9g", p.first.c_str(), p.second);
        printf("}");
    }
    printf("],\n    \"kept_n\": %zu, \"ids_hash\": \"%llu\",\n    \"top\": [", kept.size(), (unsigned long long) hash);
    const size_t shown = std::min<size_t>(kept.size(), kept.size() <= 256 ? 256 : 48);
    for (size_t i = 0; i < shown; i++) printf("%s[%d, %.12g]", i ? ", " : "", kept[i].first, kept[i].second);
    printf("],\n    \"bottom\": [");
    const size_t tail = kept.size() <= 256 ? 0 : 48;
    for (size_t i = kept.size() - tail; i < kept.size(); i++)
        printf("%s[%d, %.12g]", i + tail == kept.size() ? "" : ", ", kept[i].first, kept[i].second);
    printf("]}");
    llama_sampler_free(chain);
}

static Case given(const char * name, std::vector<float> l, std::vector<Stage> st) {
    Case c;
    c.name = name;
    c.logits = std::move(l);
    c.stages = std::move(st);
    return c;
}

static Case gen(const char * name, const char * kind, size_t n, uint64_t seed, std::vector<Stage> st) {
    Case c;
    c.name = name;
    c.gen = kind;
    c.n = n;
    c.seed = seed;
    c.stages = std::move(st);
    return c;
}

int main(int argc, char ** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s VOCAB.gguf\n", argv[0]); return 1; }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const float NI = -INFINITY;
    auto S = [](const char * n, std::vector<std::pair<std::string, double>> p = {}) { return Stage{n, std::move(p)}; };
    std::vector<Case> cases;
    const std::vector<float> five = {1, 2, 3, 4, 5}, ties = {2, 2, 2, 1, 1, 0, 2, 1}, flat(8, 0.5f);
    const std::vector<float> holes = {NI, 3, NI, 1, 2, NI, 0.5f, 2};
    for (auto * l : {&five, &ties, &flat, &holes}) {
        const char * tag = l == &five ? "five" : l == &ties ? "ties" : l == &flat ? "flat" : "holes";
        auto nm = [&](const char * s) { static std::vector<std::string> keep; keep.push_back(std::string(s) + "/" + tag); return keep.back().c_str(); };
        cases.push_back(given(nm("top_k 2"), *l, {S("top_k", {{"k", 2}})}));
        cases.push_back(given(nm("top_k 0"), *l, {S("top_k", {{"k", 0}})}));
        cases.push_back(given(nm("top_p 0.7"), *l, {S("top_p", {{"p", 0.7}})}));
        cases.push_back(given(nm("min_p 0.3"), *l, {S("min_p", {{"p", 0.3}})}));
        cases.push_back(given(nm("typ_p 0.5"), *l, {S("typ_p", {{"p", 0.5}})}));
        cases.push_back(given(nm("top_n_sigma 1"), *l, {S("top_n_sigma", {{"n", 1.0}})}));
        cases.push_back(given(nm("temp 0.5"), *l, {S("temperature", {{"t", 0.5}})}));
        cases.push_back(given(nm("temp 0"), *l, {S("temperature", {{"t", 0.0}})}));
        cases.push_back(given(nm("dynatemp"), *l, {S("temperature", {{"t", 0.8}, {"range", 0.5}, {"exponent", 1.0}})}));
        cases.push_back(given(nm("xtc 0.1"), *l, {S("xtc", {{"threshold", 0.1}})}));
    }
    // a penalised history over the five-logit vector: repeat, frequency and presence
    {
        Case c = given("penalties/five", {1, 2, 3, -4, 5}, {S("penalties", {{"last_n", 4}, {"repeat", 1.3}, {"freq", 0.2}, {"present", 0.5}})});
        c.history = {0, 4, 4, 3, 1, 1, 3};  // the last 4: 3, 1, 1, 3
        cases.push_back(c);
    }
    const std::vector<Stage> chain = {
        S("penalties", {{"last_n", 64}, {"repeat", 1.1}, {"freq", 0.0}, {"present", 0.0}}),
        S("top_k", {{"k", 40}}), S("typ_p", {{"p", 0.9}}), S("top_p", {{"p", 0.95}}), S("min_p", {{"p", 0.05}}),
        S("temperature", {{"t", 0.8}, {"range", 0.0}, {"exponent", 1.0}})};
    for (auto * kind : {"uniform", "ties", "peaked"}) {
        auto nm = [&](const char * s) { static std::vector<std::string> keep; keep.push_back(std::string(s) + "/" + kind); return keep.back().c_str(); };
        cases.push_back(gen(nm("top_k 40 of 152064"), kind, 152064, 3, {S("top_k", {{"k", 40}})}));
        cases.push_back(gen(nm("min_p 0.05 of 152064"), kind, 152064, 4, {S("min_p", {{"p", 0.05}})}));
        cases.push_back(gen(nm("top_p 0.9 of 152064"), kind, 152064, 5, {S("top_p", {{"p", 0.9}})}));
        cases.push_back(gen(nm("top_n_sigma 2 of 152064"), kind, 152064, 6, {S("top_n_sigma", {{"n", 2.0}})}));
        cases.push_back(gen(nm("typ_p 0.3 of 1000"), kind, 1000, 7, {S("typ_p", {{"p", 0.3}})}));
        Case c = gen(nm("chain of 152064"), kind, 152064, 8, chain);
        for (int i = 0; i < 40; i++) c.history.push_back((i * 7919) % 152064);
        cases.push_back(c);
        // another order, as llama-server's `samplers` takes it: temperature before min_p and top-p
        cases.push_back(gen(nm("temp first of 1000"), kind, 1000, 9,
                            {S("temperature", {{"t", 1.5}}), S("min_p", {{"p", 0.1}}), S("top_p", {{"p", 0.8}}), S("top_k", {{"k", 20}})}));
        cases.push_back(gen(nm("dynatemp of 1000"), kind, 1000, 10,
                            {S("top_k", {{"k", 100}}), S("temperature", {{"t", 1.0}, {"range", 0.7}, {"exponent", 1.5}})}));
    }
    // DRY over SmolLM2's vocabulary: a repeated phrase, with and without a breaker inside
    auto tok = [&](const char * text) {
        std::vector<llama_token> t(256);
        int n = llama_tokenize(vocab, text, (int) strlen(text), t.data(), (int) t.size(), false, true);
        t.resize(n);
        return std::vector<int>(t.begin(), t.end());
    };
    const std::vector<std::string> brk = {"\n", ":", "\"", "*"};
    for (const char * text : {"The cat sat on the mat. The cat sat on the mat. The cat sat on the",
                              "one two three four\none two three four\none two three",
                              "Name: Bob said \"hi\" Name: Bob said \"hi\" Name: Bob said",
                              "a b a b a b a b a b a b a b a b a b a b a b a b a b a b a"}) {
        for (int allowed : {2, 3}) {
            Case c = gen("dry", "zeros", n_vocab, 0, {S("dry", {{"multiplier", 0.8}, {"base", 1.75}, {"allowed_length", (double) allowed}, {"last_n", 64}})});
            static std::vector<std::string> names;
            names.push_back(std::string("dry allowed ") + std::to_string(allowed) + ": " + std::string(text).substr(0, 12));
            for (auto & ch : names.back()) if (ch == '\n' || ch == '"') ch = ' ';
            c.name = names.back();
            c.history = tok(text);
            c.breakers = brk;
            cases.push_back(c);
        }
    }
    {
        Case c = gen("dry with a breaker ' the'", "zeros", n_vocab, 0, {S("dry", {{"multiplier", 1.0}, {"base", 2.0}, {"allowed_length", 1}, {"last_n", 40}})});
        c.history = tok("The cat sat on the mat. The cat sat on the mat. The cat sat on the");
        c.breakers = {" mat.", "sat"};
        cases.push_back(c);
    }
    printf("[\n");
    for (size_t i = 0; i < cases.size(); i++) run(cases[i], vocab, i == 0);
    printf("\n]\n");
    llama_model_free(model);
    return 0;
}
