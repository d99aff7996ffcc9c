// attn-quant-accuracy: the error a quantized K/V cache adds to attention's output, per element
// type and scale granularity (keys and values chosen apart), on random data and on keys shaped
// like a trained model's, so that a cache format can be chosen by its numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "accuracy.hpp"

namespace {

using namespace attn_quant_accuracy;

const char usage_text[] =
    "usage: attn-quant-accuracy [--shape B,Hq,Hkv,Lk,D] [--len-q N[,N...]] [--pairs K:V[,K:V...]]\n"
    "                           [--types NAME[,NAME...]] [--data random,keys] [--reference]\n"
    "                           [--threads N] [--seed N] [--check]\n"
    "\n"
    "Prints the normwise error ||O - O64|| / ||O64|| of attention's output O over a quantized\n"
    "K/V cache (attn_quantize, then attn_sdpa), O64 the same attention in float64 over the\n"
    "unquantized f32 K and V, for each K/V type (rows) and each pair of key:value scale\n"
    "granularities (columns), per data kind and number of query rows. The f32 and bf16 caches'\n"
    "errors are printed below each table as yardsticks.\n"
    "\n"
    "  --shape B,Hq,Hkv,Lk,D  batch, query heads, KV heads, keys, head dim (default 1,8,8,1024,128;\n"
    "                 Hq a multiple of Hkv, D of 32)\n"
    "  --len-q LIST   query rows per call, the last Lq of the sequence with causal masking\n"
    "                 (default 1,Lk: one decoding step, a whole prefill)\n"
    "  --pairs LIST   key:value granularities among row (a scale per key row), g32 (per 32\n"
    "                 elements of a row), channel (per channel of a KV head, over its rows; 4-bit\n"
    "                 types: per pair of channels), head (per KV head), tensor (one scale);\n"
    "                 a single name means it for both (default\n"
    "                 row,g32,channel:row,channel:g32,channel,head,tensor)\n"
    "  --types LIST   I8, I8+zero, U8+zero, I4, I4+zero, U4+zero, FP8_E4M3, FP8_E5M2 (default all;\n"
    "                 +zero: with zero points, [min, max] onto the whole range)\n"
    "  --data LIST    random: q, k, v standard normal; keys: k shaped like a trained model's keys\n"
    "                 (per KV head, every channel c has its own mean mu_c ~ U(-1.5, 1.5), values\n"
    "                 f_c (mu_c + N(0, 1)), with f_c in [10, 20] for D/32 outlier channels and 1\n"
    "                 for the rest), q and v standard normal (default random,keys)\n"
    "  --reference    run attn_sdpa on the reference implementation (default: the fastest path)\n"
    "  --threads N    threads of the context (default all)\n"
    "  --seed N       the data's seed (default 1)\n"
    "  --check        exit 1 unless: every error is finite and above the f32 cache's, and\n"
    "                 below 0.5 on random data and for the 8-bit types; on random data, in\n"
    "                 every column, I8 < I4, I8+zero < I4+zero, U8+zero < U4+zero and\n"
    "                 FP8_E4M3 < FP8_E5M2; on key-shaped data, for each integer type, keys\n"
    "                 per channel < per tensor, and without zero points < per row (columns\n"
    "                 channel:X against tensor:X and row:X, the same X, when present)\n"
    "Exit status: 0 done (and checks passed), 1 a call or check failed, 2 bad command line.\n";

const kv_format all_formats[] = {
    {"I8", ATTN_DTYPE_I8, false},         {"I8+zero", ATTN_DTYPE_I8, true},
    {"U8+zero", ATTN_DTYPE_U8, true},     {"I4", ATTN_DTYPE_I4, false},
    {"I4+zero", ATTN_DTYPE_I4, true},     {"U4+zero", ATTN_DTYPE_U4, true},
    {"FP8_E4M3", ATTN_DTYPE_FP8_E4M3, false}, {"FP8_E5M2", ATTN_DTYPE_FP8_E5M2, false}};

struct gran_pair {
    granularity k, v;
    std::string name() const {
        return std::string(granularity_name(k)) + (k == v ? "" : std::string(":") + granularity_name(v));
    }
};

struct options {
    shape s{1, 8, 8, 0, 1024, 128};
    std::vector<int64_t> len_q;
    std::vector<gran_pair> pairs;
    std::vector<kv_format> formats;
    std::vector<std::string> data{"random", "keys"};
    bool reference = false, check = false;
    int threads = 0;
    uint32_t seed = 1;
};

std::vector<std::string> split(const std::string &s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t end = s.find(sep, start);
        if (end == std::string::npos) end = s.size();
        out.push_back(s.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

bool parse_int(const std::string &s, int64_t &v) {
    char *end = nullptr;
    v = std::strtoll(s.c_str(), &end, 10);
    return !s.empty() && *end == '\0';
}

bool parse_pairs(const std::string &s, std::vector<gran_pair> &out) {
    out.clear();
    for (const std::string &item : split(s, ',')) {
        const std::vector<std::string> kv = split(item, ':');
        gran_pair p{};
        if (kv.size() > 2 || !parse_granularity(kv[0], p.k) ||
            !parse_granularity(kv.size() == 2 ? kv[1] : kv[0], p.v))
            return false;
        out.push_back(p);
    }
    return true;
}

bool parse_formats(const std::string &s, std::vector<kv_format> &out) {
    out.clear();
    for (const std::string &name : split(s, ',')) {
        const auto *f = std::find_if(std::begin(all_formats), std::end(all_formats),
                                     [&](const kv_format &x) { return name == x.name; });
        if (f == std::end(all_formats)) return false;
        out.push_back(*f);
    }
    return true;
}

bool parse_shape(const std::string &s, shape &sh) {
    const std::vector<std::string> f = split(s, ',');
    int64_t v[5];
    if (f.size() != 5) return false;
    for (size_t i = 0; i < 5; ++i)
        if (!parse_int(f[i], v[i]) || v[i] < 1) return false;
    sh.batch = v[0], sh.heads_q = v[1], sh.heads_kv = v[2], sh.len_kv = v[3], sh.dim = v[4];
    // 4-bit rows need an even dim; per-group scales need groups of 32
    return sh.heads_q % sh.heads_kv == 0 && sh.dim % 32 == 0;
}

// -1: carry on; else the exit status.
int parse_options(int argc, char **argv, options &o) {
    parse_pairs("row,g32,channel:row,channel:g32,channel,head,tensor", o.pairs);
    o.formats.assign(std::begin(all_formats), std::end(all_formats));
    std::string len_q;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        const std::string v = has_value ? argv[i + 1] : "";
        bool ok = true, takes_value = true;
        if (a == "--help" || a == "-h") {
            std::fputs(usage_text, stdout);
            return 0;
        } else if (a == "--reference" || a == "--check") {
            (a == "--check" ? o.check : o.reference) = true;
            takes_value = false;
        } else if (a == "--shape") {
            ok = parse_shape(v, o.s);
        } else if (a == "--len-q") {
            len_q = v;
            ok = !v.empty();
        } else if (a == "--pairs") {
            ok = parse_pairs(v, o.pairs);
        } else if (a == "--types") {
            ok = parse_formats(v, o.formats);
        } else if (a == "--data") {
            o.data = split(v, ',');
            for (const std::string &d : o.data) ok = ok && (d == "random" || d == "keys");
        } else if (a == "--threads" || a == "--seed") {
            int64_t n = -1;
            ok = parse_int(v, n) && n >= 0 && n < (int64_t(1) << 31);
            if (a == "--threads") o.threads = int(n);
            else o.seed = uint32_t(n);
        } else {
            std::fprintf(stderr, "attn-quant-accuracy: unknown argument '%s'\n%s", a.c_str(), usage_text);
            return 2;
        }
        if (takes_value && (!has_value || !ok)) {
            std::fprintf(stderr, "attn-quant-accuracy: bad or missing value for %s\n%s", a.c_str(), usage_text);
            return 2;
        }
        i += takes_value ? 1 : 0;
    }
    for (const std::string &n : split(len_q.empty() ? "1," + std::to_string(o.s.len_kv) : len_q, ',')) {
        int64_t l = 0;
        if (!parse_int(n, l) || l < 1 || l > o.s.len_kv) {
            std::fprintf(stderr, "attn-quant-accuracy: --len-q %s: each must be in [1, Lk]\n", len_q.c_str());
            return 2;
        }
        o.len_q.push_back(l);
    }
    return -1;
}

// K of the kind "keys": per KV head, channel c holds f_c (mu_c + z), z standard normal.
std::vector<float> key_shaped(const shape &s, std::mt19937 &gen) {
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> mean(-1.5f, 1.5f), big(10.0f, 20.0f);
    const int64_t D = s.dim, L = s.len_kv;
    std::vector<float> k(size_t(s.batch * s.heads_kv * L * D));
    std::vector<float> mu(static_cast<size_t>(D)), factor(static_cast<size_t>(D));
    std::vector<int64_t> channels(static_cast<size_t>(D));
    for (int64_t bh = 0; bh < s.batch * s.heads_kv; ++bh) {
        for (int64_t c = 0; c < D; ++c) mu[size_t(c)] = mean(gen), factor[size_t(c)] = 1.0f, channels[size_t(c)] = c;
        std::shuffle(channels.begin(), channels.end(), gen);
        for (int64_t o = 0; o < std::max<int64_t>(1, D / 32); ++o) factor[size_t(channels[size_t(o)])] = big(gen);
        for (int64_t j = 0; j < L; ++j)
            for (int64_t c = 0; c < D; ++c)
                k[size_t((bh * L + j) * D + c)] = factor[size_t(c)] * (mu[size_t(c)] + normal(gen));
    }
    return k;
}

std::vector<float> normal_values(size_t n, std::mt19937 &gen) {
    std::normal_distribution<float> normal;
    std::vector<float> x(n);
    for (float &e : x) e = normal(gen);
    return x;
}

// errors[format][pair] of one table
using table = std::vector<std::vector<double>>;

void print_table(const options &o, const table &t) {
    std::printf("  %-9s", "K:V");
    for (const gran_pair &p : o.pairs) std::printf(" %13s", p.name().c_str());
    std::printf("\n");
    for (size_t f = 0; f < o.formats.size(); ++f) {
        std::printf("  %-9s", o.formats[f].name);
        for (double e : t[f]) std::printf(" %13.2e", e);
        std::printf("\n");
    }
}

// Failures of --check's rules in one table; f32: the f32 cache's error.
std::vector<std::string> check_table(const options &o, const table &t, bool random, double f32,
                                     const std::string &where) {
    std::vector<std::string> bad;
    auto index = [&](const char *name) -> int {  // a format's row, -1 if not in the table
        for (size_t f = 0; f < o.formats.size(); ++f)
            if (std::string(o.formats[f].name) == name) return int(f);
        return -1;
    };
    char msg[256];
    for (size_t f = 0; f < o.formats.size(); ++f) {
        // 4-bit keys shaped like a model's may lose most of the output (that is what the table
        // shows); everything else stays well below half of it
        const bool bounded = random || attn_dtype_bits(o.formats[f].type) == 8;
        for (size_t p = 0; p < o.pairs.size(); ++p)
            if (!(std::isfinite(t[f][p]) && t[f][p] > f32 && (!bounded || t[f][p] < 0.5))) {
                std::snprintf(msg, sizeof msg, "%s %s %s: error %.3g not finite, or not above f32's %.3g%s",
                              where.c_str(), o.formats[f].name, o.pairs[p].name().c_str(), t[f][p], f32,
                              bounded ? " and below 0.5" : "");
                bad.push_back(msg);
            }
    }
    const char *finer_coarser[][2] = {{"I8", "I4"}, {"I8+zero", "I4+zero"}, {"U8+zero", "U4+zero"},
                                      {"FP8_E4M3", "FP8_E5M2"}};
    for (auto &fc : finer_coarser) {
        const int a = index(fc[0]), b = index(fc[1]);
        if (!random || a < 0 || b < 0) continue;
        for (size_t p = 0; p < o.pairs.size(); ++p)
            if (!(t[size_t(a)][p] < t[size_t(b)][p])) {
                std::snprintf(msg, sizeof msg, "%s %s: %s error %.3g not below %s's %.3g", where.c_str(),
                              o.pairs[p].name().c_str(), fc[0], t[size_t(a)][p], fc[1], t[size_t(b)][p]);
                bad.push_back(msg);
            }
    }
    for (size_t f = 0; f < o.formats.size() && !random; ++f) {
        const attn_dtype type = o.formats[f].type;
        if (type == ATTN_DTYPE_FP8_E4M3 || type == ATTN_DTYPE_FP8_E5M2) continue;
        for (size_t p = 0; p < o.pairs.size(); ++p)
            for (size_t r = 0; r < o.pairs.size(); ++r)
                // symmetric: the per-row scale follows the row's outliers and means; with zero
                // points a row's range still follows its outliers, but closely enough to
                // per channel at 8 bits that only the per-tensor scale is always worse
                if (o.pairs[p].k == granularity::channel && o.pairs[r].v == o.pairs[p].v &&
                    (o.pairs[r].k == granularity::tensor ||
                     (o.pairs[r].k == granularity::row && !o.formats[f].zero)) &&
                    !(t[f][p] < t[f][r])) {
                    std::snprintf(msg, sizeof msg, "%s %s: keys per channel (%s) %.3g not below %s %.3g",
                                  where.c_str(), o.formats[f].name, o.pairs[p].name().c_str(),
                                  t[f][p], o.pairs[r].name().c_str(), t[f][r]);
                    bad.push_back(msg);
                }
    }
    return bad;
}

// One table: every format and pair at one Lq over one data set. false: a call failed.
bool measure(attn_context *ctx, const options &o, const shape &s, const std::vector<float> &q,
             const std::vector<float> &k, const std::vector<float> &v, table &t) {
    const std::vector<double> exact = attention_exact(s, q, k, v);
    std::vector<float> out;
    t.assign(o.formats.size(), std::vector<double>(o.pairs.size(), 0.0));
    for (size_t f = 0; f < o.formats.size(); ++f) {
        std::map<granularity, quantized_side> ks, vs;
        for (const gran_pair &p : o.pairs) {
            const kv_format &fmt = o.formats[f];
            attn_status st = ATTN_OK;
            if (!ks.count(p.k)) st = quantize_side(k, s.batch, s.heads_kv, s.len_kv, s.dim, fmt, p.k, ks[p.k]);
            if (st == ATTN_OK && !vs.count(p.v))
                st = quantize_side(v, s.batch, s.heads_kv, s.len_kv, s.dim, fmt, p.v, vs[p.v]);
            if (st == ATTN_OK) st = attention_quantized(ctx, s, q, fmt.type, ks[p.k], vs[p.v], out);
            if (st != ATTN_OK) {
                std::fprintf(stderr, "attn-quant-accuracy: %s %s: %s (%s)\n", fmt.name,
                             p.name().c_str(), attn_status_string(st), attn_last_error());
                return false;
            }
            t[f][size_t(&p - o.pairs.data())] = normwise_error(out, exact);
        }
    }
    std::vector<double> base;
    for (attn_dtype type : {ATTN_DTYPE_F32, ATTN_DTYPE_BF16}) {
        if (attention_stored(ctx, s, q, k, v, type, out) != ATTN_OK) {
            std::fprintf(stderr, "attn-quant-accuracy: %s cache: %s\n",
                         type == ATTN_DTYPE_F32 ? "f32" : "bf16", attn_last_error());
            return false;
        }
        base.push_back(normwise_error(out, exact));
    }
    t.push_back(base);  // the last row: the f32 and bf16 caches
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    options o;
    if (int rc = parse_options(argc, argv, o); rc >= 0) return rc;
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = o.reference ? ATTN_IMPL_REFERENCE : ATTN_IMPL_AUTO;
    cfg.num_threads = o.threads;
    attn_context *ctx = nullptr;
    if (attn_context_create(&cfg, &ctx) != ATTN_OK) {
        std::fprintf(stderr, "attn-quant-accuracy: context: %s\n", attn_last_error());
        return 1;
    }
    const shape &s = o.s;
    std::printf("attn %s (%s): normwise error ||O - O64|| / ||O64|| of attention over a quantized\n"
                "K/V cache, O64 = float64 attention over the f32 K/V; B%lld Hq%lld Hkv%lld Lk%lld "
                "D%lld, causal, seed %u\n",
                attn_version(), attn_context_isa(ctx), (long long)s.batch, (long long)s.heads_q,
                (long long)s.heads_kv, (long long)s.len_kv, (long long)s.dim, o.seed);
    std::vector<std::string> failures;
    bool ok = true;
    for (const std::string &kind : o.data) {
        std::mt19937 gen(o.seed);
        const size_t kv_n = size_t(s.batch * s.heads_kv * s.len_kv * s.dim);
        const std::vector<float> k = kind == "keys" ? key_shaped(s, gen) : normal_values(kv_n, gen);
        const std::vector<float> v = normal_values(kv_n, gen);
        for (int64_t len_q : o.len_q) {
            shape sq = s;
            sq.len_q = len_q;
            const std::vector<float> q = normal_values(size_t(s.batch * s.heads_q * len_q * s.dim), gen);
            table t;
            if (!(ok = measure(ctx, o, sq, q, k, v, t))) break;
            const std::string where = kind + " Lq" + std::to_string(len_q);
            std::printf("\n%s data (%s), Lq %lld%s:\n", kind.c_str(),
                        kind == "keys" ? "keys with outlier channels and per-channel means" : "standard normal",
                        (long long)len_q, len_q == 1 ? " (one decoding step)" : "");
            const std::vector<double> base = t.back();
            t.pop_back();
            print_table(o, t);
            std::printf("  yardsticks: f32 cache %.2e, bf16 cache %.2e\n", base[0], base[1]);
            if (o.check)
                for (std::string &m : check_table(o, t, kind == "random", base[0], where)) failures.push_back(m);
        }
        if (!ok) break;
    }
    attn_context_destroy(ctx);
    if (!ok) return 1;
    for (const std::string &m : failures) std::printf("CHECK FAILED: %s\n", m.c_str());
    if (o.check) std::printf("\ncheck: %s\n", failures.empty() ? "passed" : "FAILED");
    return failures.empty() ? 0 : 1;
}
