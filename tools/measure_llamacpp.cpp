// Memory probe for llama.cpp (our code, compiled against a llama.cpp build; see measure_llamacpp.py).
//
// Loads a GGUF with all layers on the GPU, creates a context the way llama-server does (and, with
// mtp=1, the MTP draft context the way common/speculative.cpp common_speculative_init_result does),
// decodes a prompt and a few single tokens, then prints one line
//   RESULT {"bufts": {...}, "cuda_free": ..., "cuda_total": ..., ...}
// with llama_get_memory_breakdown (exact bytes per buffer type) and cudaMemGetInfo. llama.cpp's own
// log lines go to stderr unchanged. Arguments are key=value pairs (see main()).
#include "llama.h"
#include "llama-ext.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

static std::map<std::string, std::string> g_args;

static std::string arg(const char * k, const char * def) {
    auto it = g_args.find(k);
    return it == g_args.end() ? std::string(def) : it->second;
}
static long argi(const char * k, long def) {
    auto it = g_args.find(k);
    return it == g_args.end() ? def : std::atol(it->second.c_str());
}

static ggml_type type_of(const std::string & s) {
    static const std::map<std::string, ggml_type> m = {
        {"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16},
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
        {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1}, {"iq4_nl", GGML_TYPE_IQ4_NL}};
    auto it = m.find(s);
    if (it == m.end()) { fprintf(stderr, "bad type %s\n", s.c_str()); std::exit(2); }
    return it->second;
}

static void log_cb(ggml_log_level, const char * text, void *) { fputs(text, stderr); }

static size_t used_now(size_t * total_out) {
    size_t free_b = 0, total_b = 0;
    cudaDeviceSynchronize();
    cudaMemGetInfo(&free_b, &total_b);
    if (total_out) *total_out = total_b;
    return free_b;
}

static void print_breakdown(FILE * f, const char * key, llama_context * ctx) {
    fprintf(f, "\"%s\": {", key);
    bool first = true;
    for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
        fprintf(f, "%s\"%s\": [%zu, %zu, %zu]", first ? "" : ", ", ggml_backend_buft_name(buft),
                mb.model, mb.context, mb.compute);
        first = false;
    }
    fprintf(f, "}");
}

static int decode_prompt(llama_context * ctx, int n_prompt, int n_batch, int n_vocab, int seq) {
    llama_batch batch = llama_batch_init(n_batch, 0, 1);
    for (int start = 0; start < n_prompt; start += n_batch) {
        batch.n_tokens = 0;
        for (int i = start; i < n_prompt && i < start + n_batch; i++) {
            int j = batch.n_tokens++;
            batch.token[j] = 1 + (i * 7919) % (n_vocab - 1);
            batch.pos[j] = i;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = seq;
            batch.logits[j] = (i == n_prompt - 1);
        }
        int rc = llama_decode(ctx, batch);
        if (rc != 0) { llama_batch_free(batch); return rc; }
    }
    llama_batch_free(batch);
    return 0;
}

int main(int argc, char ** argv) {
    for (int i = 1; i < argc; i++) {
        const char * eq = std::strchr(argv[i], '=');
        if (eq) g_args[std::string(argv[i], eq - argv[i])] = eq + 1;
    }
    const std::string model_path = arg("model", "");
    const long n_ctx = argi("ctx", 4096), n_seq = argi("np", 1), n_ubatch = argi("ub", 512);
    const long n_batch = argi("b", 2048), n_draft = argi("draft", 3);
    const bool mtp = argi("mtp", 0) != 0, unified = argi("unified", 0) != 0;
    const long n_cpu_moe = argi("ncmoe", 0);
    const std::string fa = arg("fa", "on");

    size_t total_b = 0;
    const size_t free0 = used_now(&total_b);  // after the CUDA context exists
    llama_log_set(log_cb, nullptr);
    llama_backend_init();

    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 999;
    mp.load_mtp = mtp;
    std::vector<std::string> patterns;
    std::vector<llama_model_tensor_buft_override> ov;
    if (n_cpu_moe < 0) {  // --cpu-moe (common/common.h LLM_FFN_EXPS_REGEX)
        patterns.push_back("\\.ffn_(up|down|gate|gate_up)_(ch|)exps");
    } else {
        for (long il = 0; il < n_cpu_moe; il++)
            patterns.push_back("blk\\." + std::to_string(il) + "\\.ffn_(up|down|gate|gate_up)_(ch|)exps");
    }
    for (auto & p : patterns) ov.push_back({p.c_str(), ggml_backend_cpu_buffer_type()});
    if (!ov.empty()) { ov.push_back({nullptr, nullptr}); mp.tensor_buft_overrides = ov.data(); }

    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { printf("RESULT {\"status\": \"load_failed\"}\n"); return 1; }
    const size_t free_model = used_now(nullptr);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    // tools/server/server-context.cpp server_output_limits + common/common.cpp params_to_llama.
    const long per_seq = 1 + (mtp ? n_draft : 0);
    auto cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_ubatch = n_ubatch;
    cp.n_seq_max = n_seq;
    cp.kv_unified = unified;
    cp.swa_full = false;  // the CLI default (the C API default is true)
    cp.type_k = type_of(arg("ctk", "f16"));
    cp.type_v = type_of(arg("ctv", "f16"));
    cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.n_outputs_max = (uint32_t) std::min<long>(n_batch, n_seq * per_seq);
    cp.n_outputs_max_per_seq = (uint32_t) std::min<long>(n_batch, per_seq);
    cp.n_rs_seq = mtp ? n_draft : 0;  // common_params_speculative::need_n_rs_seq
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { printf("RESULT {\"status\": \"ctx_failed\"}\n"); return 1; }
    const size_t free_ctx = used_now(nullptr);

    llama_context * dft = nullptr;
    if (mtp) {  // common/speculative.cpp common_base_params_to_speculative + init_result
        auto dp = cp;
        dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        dp.n_ctx = llama_n_ctx(ctx);
        dp.n_rs_seq = 0;
        dp.ctx_other = ctx;
        dp.type_k = type_of(arg("ctkd", "f16"));
        dp.type_v = type_of(arg("ctvd", "f16"));
        dp.n_outputs_max = n_seq;
        dp.n_outputs_max_per_seq = 1;
        dft = llama_init_from_model(model, dp);
        if (!dft) { printf("RESULT {\"status\": \"mtp_ctx_failed\"}\n"); return 1; }
    }

    // fill=1: decode a prompt that fills the context (FA off keeps a KQ temporary that grows with it)
    const int n_prompt = argi("fill", 0) ? (int) (llama_n_ctx(ctx) / n_seq - 16)
                                         : (int) std::max<long>(512, n_ubatch);
    int rc = decode_prompt(ctx, n_prompt, (int) n_batch, n_vocab, 0);
    const size_t free_prompt = used_now(nullptr);
    int rc_dft = 0;
    if (dft) rc_dft = decode_prompt(dft, n_prompt, (int) n_batch, n_vocab, 0);
    for (int t = 0; t < 3 && rc == 0; t++) {
        llama_batch b = llama_batch_init(1, 0, 1);
        b.n_tokens = 1; b.token[0] = 2 + t; b.pos[0] = n_prompt + t; b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0; b.logits[0] = 1;
        rc = llama_decode(ctx, b);
        llama_batch_free(b);
    }
    const size_t free_peak = used_now(nullptr);

    printf("RESULT {\"status\": \"ok\", \"rc_decode\": %d, \"rc_mtp_decode\": %d, \"n_ctx\": %u, "
           "\"n_prompt\": %d, ", rc, rc_dft, llama_n_ctx(ctx), n_prompt);
    printf("\"cuda_total\": %zu, \"free_cuda_ctx\": %zu, \"free_model\": %zu, \"free_ctx\": %zu, "
           "\"free_prompt\": %zu, \"free_peak\": %zu, ",
           total_b, free0, free_model, free_ctx, free_prompt, free_peak);
    print_breakdown(stdout, "target", ctx);
    if (dft) { printf(", "); print_breakdown(stdout, "draft", dft); }
    printf("}\n");
    fflush(stdout);
    if (dft) llama_free(dft);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
