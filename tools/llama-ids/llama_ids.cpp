// llama_ids: greedy generation from token ids with llama.cpp's C API, for the
// `llama.cpp` engine of `memdial sweep` (ids in, ids out: llama-completion reads
// text and prints text, which would put two tokenizers between the engines).
//
//   llama_ids -m MODEL.gguf --ids 1,2,3 -n N [-t THREADS] [--eos 7,9]
//             [--load-mode mmap|none|dio] [--no-repack] [--logits-out F.f32] --out OUT.json
//   llama_ids -m MODEL.gguf --tokenize TEXT [--no-special]
//   llama_ids --version
//
// --tokenize loads only the GGUF's vocabulary and prints the ids of TEXT with the
// model's own tokenizer, as llama.cpp tokenizes a prompt (its BOS etc. added as the
// GGUF says; --no-special adds none), one line: `ids: 1,2,3`.
//
// --version initialises llama.cpp's backends and prints the build (LLAMA_IDS_BUILD,
// set by tools/build-engines.sh) on one line and llama.cpp's system info (the CPU
// features it was built for) on the next, so `memdial engines check` sees it run.
//
// Prefills the prompt ids in one llama_process call, then decodes one token per
// step. Each step's token is the argmax of the last position's logits, ties to the
// lowest id (memdial's rule); llama.cpp's sampler is not used. Generation stops after
// an id in --eos (included) or after N tokens.
//
// --no-repack keeps quantized weights where they were loaded (llama.cpp's CPU backend
// otherwise repacks MXFP4 / Q-type weights into anonymous memory for its faster
// kernels, which holds the whole model in RAM whatever the load mode).
// --logits-out writes every step's logits (last position), raw little-endian f32,
// steps × n_vocab, for comparisons with `memdial run --logits-out`.
//
// Writes OUT.json: {"engine": "llama.cpp", "load_mode": ..., "output_ids": [...], "ttft_s": s, "decode_s_per_token": [...], "load_s": s,
// "top2_margin": [...]} (seconds from ggml_time_us around each llama_process call).
//
// Build against a CPU build of llama.cpp (see the README, "memdial against other
// engines"):
//   g++ -O2 -std=c++17 tools/llama-ids/llama_ids.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//     $LLAMA/build/src/libllama.a $LLAMA/build/ggml/src/libggml.a \
//     $LLAMA/build/ggml/src/libggml-cpu.a $LLAMA/build/ggml/src/libggml-base.a \
//     -fopenmp -lpthread -ldl -o llama_ids
#include "llama.h"

#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static std::vector<int> parse_ids(const char * s) {
    std::vector<int> v;
    std::string cur;
    for (const char * p = s;; ++p) {
        if (*p == ',' || *p == ' ' || *p == '\0') {
            if (!cur.empty()) {
                char * end = nullptr;
                long x = std::strtol(cur.c_str(), &end, 10);
                if (*end != '\0' || x < 0) {
                    fprintf(stderr, "llama_ids: bad id %s\n", cur.c_str());
                    std::exit(2);
                }
                v.push_back((int) x);
                cur.clear();
            }
            if (*p == '\0') break;
        } else {
            cur += *p;
        }
    }
    return v;
}

static void usage() {
    fprintf(stderr, "usage: llama_ids -m MODEL.gguf --ids 1,2,3 -n N [-t THREADS] [--eos 7,9] "
                    "[--load-mode mmap|none|dio] [--no-repack] [--logits-out F.f32] --out OUT.json\n"
                    "       llama_ids -m MODEL.gguf --tokenize TEXT [--no-special]\n"
                    "       llama_ids --version\n");
    std::exit(2);
}

static void silent(enum ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

#ifndef LLAMA_IDS_BUILD
#define LLAMA_IDS_BUILD "unknown build"
#endif

int main(int argc, char ** argv) {
    std::setlocale(LC_NUMERIC, "C");
    if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
        llama_log_set(silent, nullptr);
        llama_backend_init();
        printf("llama_ids (%s)\n%s\n", LLAMA_IDS_BUILD, llama_print_system_info());
        llama_backend_free();
        return 0;
    }
    std::string model_path, out_path, logits_path, mode = "mmap", text;
    bool tokenize = false, add_special = true;
    std::vector<int> ids, eos;
    int n_predict = -1, threads = 1;
    bool repack = true;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--no-repack") { repack = false; continue; }
        if (a == "--no-special") { add_special = false; continue; }
        if (i + 1 >= argc) usage();
        const char * v = argv[++i];
        if (a == "-m") model_path = v;
        else if (a == "--ids") ids = parse_ids(v);
        else if (a == "-n") n_predict = std::atoi(v);
        else if (a == "-t") threads = std::atoi(v);
        else if (a == "--eos") eos = parse_ids(v);
        else if (a == "--load-mode") mode = v;
        else if (a == "--out") out_path = v;
        else if (a == "--logits-out") logits_path = v;
        else if (a == "--tokenize") { text = v; tokenize = true; }
        else usage();
    }
    if (tokenize) {
        if (model_path.empty()) usage();
        llama_model_params mp = llama_model_default_params();
        mp.vocab_only = true;
        mp.progress_callback = [](float, void *) { return true; };
        llama_log_set(silent, nullptr);
        llama_backend_init();
        llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
        if (!model) {
            fprintf(stderr, "llama_ids: cannot load %s\n", model_path.c_str());
            return 1;
        }
        const llama_vocab * vocab = llama_model_get_vocab(model);
        // A first call with no room returns minus the count needed.
        int n = -llama_tokenize(vocab, text.c_str(), (int32_t) text.size(), nullptr, 0, add_special, false);
        std::vector<llama_token> toks(n > 0 ? n : 0);
        if (n > 0 && llama_tokenize(vocab, text.c_str(), (int32_t) text.size(), toks.data(), n, add_special, false) != n) {
            fprintf(stderr, "llama_ids: cannot tokenize the text\n");
            return 1;
        }
        printf("ids: ");
        for (size_t i = 0; i < toks.size(); ++i) printf("%s%d", i ? "," : "", toks[i]);
        printf("\n");
        llama_model_free(model);
        return 0;
    }
    if (model_path.empty() || out_path.empty() || ids.empty() || n_predict < 1 || threads < 1) usage();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = repack;
    mp.progress_callback = [](float, void *) { return true; };  // no progress dots
    if (mode == "mmap") mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    else if (mode == "none") mp.load_mode = LLAMA_LOAD_MODE_NONE;
    else if (mode == "dio") mp.load_mode = LLAMA_LOAD_MODE_DIRECT_IO;
    else usage();

    llama_log_set(silent, nullptr);
    llama_backend_init();
    const int64_t t0 = ggml_time_us();
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) {
        fprintf(stderr, "llama_ids: cannot load %s\n", model_path.c_str());
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int id : ids) {
        if (id >= n_vocab) {
            fprintf(stderr, "llama_ids: prompt id %d >= vocabulary %d\n", id, n_vocab);
            return 2;
        }
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = ids.size() + n_predict;
    cp.n_batch = ids.size();
    cp.n_ubatch = ids.size();
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_ids: cannot create a context\n");
        return 1;
    }
    const double load_s = (ggml_time_us() - t0) / 1e6;
    FILE * lf = nullptr;
    if (!logits_path.empty() && !(lf = fopen(logits_path.c_str(), "wb"))) {
        fprintf(stderr, "llama_ids: cannot write %s\n", logits_path.c_str());
        return 1;
    }
    llama_batch_ext * batch = llama_batch_ext_init(ctx);
    std::vector<int> out;
    std::vector<double> decode, margins;
    double ttft = 0;
    std::vector<int> cur = ids;
    int pos = 0;
    for (int step = 0; step < n_predict; ++step) {
        llama_batch_ext_clear(batch);
        for (size_t i = 0; i < cur.size(); ++i) {
            const int32_t idx = llama_batch_ext_add_token(batch, 0, cur[i]);
            const llama_pos p = pos + (llama_pos) i;
            llama_batch_ext_set_pos(batch, idx, &p);
        }
        llama_batch_ext_set_output_logits(batch, (int32_t) cur.size() - 1, true);
        const int64_t t = ggml_time_us();
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch)) {
            fprintf(stderr, "llama_ids: llama_process failed at step %d\n", step);
            return 1;
        }
        const float * logits = llama_get_logits_ith(ctx, -1);
        if (lf) fwrite(logits, sizeof(float), n_vocab, lf);
        int best = 0;
        float b1 = logits[0], b2 = -INFINITY;
        for (int i = 1; i < n_vocab; ++i) {
            if (logits[i] > b1) { b2 = b1; b1 = logits[i]; best = i; }
            else if (logits[i] > b2) { b2 = logits[i]; }
        }
        const double dt = (ggml_time_us() - t) / 1e6;
        if (step == 0) ttft = dt; else decode.push_back(dt);
        out.push_back(best);
        margins.push_back((double) b1 - (double) b2);
        pos += (int) cur.size();
        cur.assign(1, best);
        bool stop = false;
        for (int e : eos) stop |= (e == best);
        if (stop) break;
    }
    if (lf) fclose(lf);
    FILE * f = fopen(out_path.c_str(), "w");
    if (!f) {
        fprintf(stderr, "llama_ids: cannot write %s\n", out_path.c_str());
        return 1;
    }
    fprintf(f, "{\"engine\": \"llama.cpp\", \"load_mode\": \"%s\", \"output_ids\": [", mode.c_str());
    for (size_t i = 0; i < out.size(); ++i) fprintf(f, "%s%d", i ? ", " : "", out[i]);
    fprintf(f, "], \"ttft_s\": %.6f, \"load_s\": %.6f, \"decode_s_per_token\": [", ttft, load_s);
    for (size_t i = 0; i < decode.size(); ++i) fprintf(f, "%s%.6f", i ? ", " : "", decode[i]);
    fprintf(f, "], \"top2_margin\": [");
    for (size_t i = 0; i < margins.size(); ++i) fprintf(f, "%s%.6g", i ? ", " : "", margins[i]);
    fprintf(f, "]}\n");
    fclose(f);
    printf("ids: ");
    for (size_t i = 0; i < out.size(); ++i) printf("%s%d", i ? "," : "", out[i]);
    printf("\n");
    llama_batch_ext_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
