// Command-line parsing for attn-demo. Every malformed option is a usage_error (exit 2).
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "demo.hpp"

namespace demo {

std::string usage() {
    return "usage: attn-demo [options]\n"
           "\n"
           "Works the three-token example of \"Attention and Self-Attention\" (Q, K, V, the\n"
           "scores, the softmax, A, the output, the causal A) with the attn library and checks\n"
           "it against the printed figures, then runs two experiments: rotating token 3's\n"
           "query, and raising the dimension with and without the sqrt(d_k) division.\n"
           "\n"
           "options:\n"
           "  --dims LIST     embedding dimensions for the second experiment, even numbers\n"
           "                  between 2 and 65536, comma separated (default 2,8,32,128,512)\n"
           "  --no-scale      use scale 1 (no division by sqrt(d_k)) in the walkthrough and the\n"
           "                  rotation too; A then differs from the printed matrices (exit 1)\n"
           "  --step DEG      rotation step in degrees, 0.1..360 (default 30)\n"
           "  --impl NAME     reference | simd | auto (default auto)\n"
           "  --isa NAME      highest instruction set: scalar | sse4 | avx2 | avx512 |\n"
           "                  avx512_bf16 | amx | auto\n"
           "  --threads N     at most N threads, 0 = all hardware threads (default 0)\n"
           "  --help          this text\n"
           "\n"
           "exit status: 0 when every check passes, 1 when a check fails or a library call\n"
           "fails (the library's message is printed), 2 for a bad command line.\n";
}

bool help_requested(int argc, char **argv) {
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
    return false;
}

namespace {

long long parse_integer(const std::string &opt, const std::string &text) {
    errno = 0;
    char *end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE)
        throw usage_error(opt + ": '" + text + "' is not an integer");
    return v;
}

std::vector<int64_t> parse_dims(const std::string &text) {
    std::vector<int64_t> dims;
    size_t start = 0;
    while (true) {
        size_t comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                         : comma - start);
        long long d = parse_integer("--dims", item);
        if (d < 2 || d > 65536 || d % 2 != 0)
            throw usage_error("--dims: " + item +
                              " is not an even dimension between 2 and 65536 (each of the two "
                              "coordinates is repeated d/2 times)");
        dims.push_back(d);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return dims;
}

double parse_step(const std::string &text) {
    errno = 0;
    char *end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
        throw usage_error("--step: '" + text + "' is not a number of degrees");
    if (v < 0.1 || v > 360.0)
        throw usage_error("--step: " + text + " is outside 0.1..360 degrees");
    return v;
}

attn_impl parse_impl(const std::string &text) {
    if (text == "auto") return ATTN_IMPL_AUTO;
    if (text == "reference") return ATTN_IMPL_REFERENCE;
    if (text == "simd") return ATTN_IMPL_SIMD;
    throw usage_error("--impl: '" + text + "' is not one of reference, simd, auto");
}

attn_isa parse_isa(const std::string &text) {
    if (text == "auto") return ATTN_ISA_AUTO;
    if (text == "scalar") return ATTN_ISA_SCALAR;
    if (text == "sse4") return ATTN_ISA_SSE4;
    if (text == "avx2") return ATTN_ISA_AVX2;
    if (text == "avx512") return ATTN_ISA_AVX512;
    if (text == "avx512_bf16") return ATTN_ISA_AVX512_BF16;
    if (text == "amx") return ATTN_ISA_AMX;
    if (text == "amx_emulated") return ATTN_ISA_AMX_EMULATED;
    throw usage_error("--isa: '" + text + "' is not one of scalar, sse4, avx2, avx512, "
                      "avx512_bf16, amx, amx_emulated, auto");
}

}  // namespace

options parse_options(int argc, char **argv) {
    options opt;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_inline_value = false;
        // Accept both "--dims 2,8" and "--dims=2,8".
        size_t eq = arg.find('=');
        if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_inline_value = true;
        }
        auto take_value = [&]() -> std::string {
            if (has_inline_value) return value;
            if (i + 1 >= argc) throw usage_error(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--no-scale") {
            if (has_inline_value) throw usage_error("--no-scale takes no value");
            opt.no_scale = true;
        } else if (arg == "--dims") {
            opt.dims = parse_dims(take_value());
        } else if (arg == "--step") {
            opt.step_deg = parse_step(take_value());
        } else if (arg == "--impl") {
            opt.impl = parse_impl(take_value());
        } else if (arg == "--isa") {
            opt.isa = parse_isa(take_value());
        } else if (arg == "--threads") {
            std::string text = take_value();
            long long n = parse_integer("--threads", text);
            if (n < 0 || n > 4096) throw usage_error("--threads: " + text + " is outside 0..4096");
            opt.threads = static_cast<int>(n);
        } else {
            throw usage_error("unknown option '" + std::string(argv[i]) + "'");
        }
    }
    return opt;
}

}  // namespace demo
