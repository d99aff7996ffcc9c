// attn-train: the source document's lesson, learned. Attention lets a position read a token at
// a data-dependent earlier position; a fixed window cannot. On associative recall
// ("k1 v1 k2 v2 ... kn vn kq -> the v paired with kq", model.hpp) it trains
//   full:     one causal attention layer (attn_mha_forward_f32 / attn_mha_backward_f32)
//   windowed: the same layer seeing only the previous w tokens (attn_gemm_f32, attn_sdpa_f32
//             and attn_sdpa_backward_f32 with an additive mask)
// for the same number of steps (--dtype bf16: both with bf16 attention through attn_sdpa, q, k,
// v, the output and their gradients in bf16), prints both held-out accuracies side by side,
// the learned attention of one example as a heat map, and the loss curves (CSV, and a PNG
// through /usr/bin/python3 with matplotlib when available). The gradients are checked once
// against central differences first.
//
// Usage: attn-train [--seed N] [--quick] [--steps N] [--seconds S] [--window W]
//                   [--threads N] [--out DIR] [--max-loss X] [--dtype f32|bf16]
//   --seconds S: stop after S seconds of wall clock if --steps have not run by then; 0: no
//                limit, exactly --steps steps (what a test asserting on the loss needs).
//   --max-loss X: exit status 1 unless the full model's final training loss is below X.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model.hpp"

namespace attn_train {
namespace {

struct options {
    uint32_t seed = 1;
    bool quick = false;
    int steps = 2000, window = 4, threads = 0, batch = 64;
    double seconds = 110.0, max_loss = -1.0;
    std::string out = ".";
    attn_dtype dtype = ATTN_DTYPE_F32;
};

bool parse(int argc, char **argv, options &o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&](const char *name) -> const char * {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "attn-train: %s needs a value\n", name);
                return nullptr;
            }
            return argv[++i];
        };
        const char *v = nullptr;
        if (a == "--quick") {
            o.quick = true;
            o.steps = 600;
            o.seconds = 25.0;
        } else if (a == "--seed" && (v = value("--seed"))) {
            o.seed = uint32_t(std::strtoul(v, nullptr, 10));
        } else if (a == "--steps" && (v = value("--steps"))) {
            o.steps = std::atoi(v);
        } else if (a == "--seconds" && (v = value("--seconds"))) {
            o.seconds = std::atof(v);
        } else if (a == "--window" && (v = value("--window"))) {
            o.window = std::atoi(v);
        } else if (a == "--threads" && (v = value("--threads"))) {
            o.threads = std::atoi(v);
        } else if (a == "--out" && (v = value("--out"))) {
            o.out = v;
        } else if (a == "--max-loss" && (v = value("--max-loss"))) {
            o.max_loss = std::atof(v);
        } else if (a == "--dtype" && (v = value("--dtype")) &&
                   (!std::strcmp(v, "f32") || !std::strcmp(v, "bf16"))) {
            o.dtype = std::strcmp(v, "bf16") ? ATTN_DTYPE_F32 : ATTN_DTYPE_BF16;
        } else {
            std::fprintf(stderr,
                         "usage: attn-train [--seed N] [--quick] [--steps N] [--seconds S] "
                         "[--window W] [--threads N] [--out DIR] [--max-loss X] "
                         "[--dtype f32|bf16]\n");
            return false;
        }
    }
    return o.steps > 0 && o.window > 0 && o.seconds >= 0.0;
}

char shade(float w) {
    static const char levels[] = " .:-=+*#%@";
    if (!(w > 0.0f)) return levels[0];
    if (w >= 1.0f) return levels[9];
    return levels[int(std::lround(w * 9.0f))];
}

std::string token_name(const task &t, int tok) {
    return tok < t.keys ? "k" + std::to_string(tok) : "v" + std::to_string(tok - t.keys);
}

// The weights of one head for one sequence, row i = query position i; the last row is the
// query key, whose weight should sit on the value paired with it.
void print_heat_map(const task &t, const batch &b, int index, const std::vector<float> &w,
                    const char *title) {
    const int L = b.length;
    const int *tok = &b.tokens[size_t(index * L)];
    std::printf("%s (shade by weight: ' .:-=+*#%%@' = 0 .. 1; rows: query positions)\n", title);
    std::printf("          ");
    for (int j = 0; j < L; ++j) std::printf("%-4s", token_name(t, tok[j]).c_str());
    std::printf("\n");
    for (int i = 0; i < L; ++i) {
        std::printf("  %2d %-4s ", i, token_name(t, tok[i]).c_str());
        for (int j = 0; j < L; ++j) {
            const char c = shade(w[size_t(i * L + j)]);
            std::printf("%c%c%c|", c, c, c);
        }
        std::printf("\n");
    }
    int best = 0;
    for (int j = 1; j < L; ++j)
        if (w[size_t((L - 1) * L + j)] > w[size_t((L - 1) * L + best)]) best = j;
    std::printf("  query %s: largest weight %.3f on position %d (%s); its pair's value is at "
                "position %d (%s)\n",
                token_name(t, tok[L - 1]).c_str(), double(w[size_t((L - 1) * L + best)]), best,
                token_name(t, tok[best]).c_str(), b.source[size_t(index)],
                token_name(t, tok[b.source[size_t(index)]]).c_str());
}

struct curve_point {
    int step;
    double loss_full, loss_window;
};

void write_curves(const std::string &dir, const std::vector<curve_point> &c, int window) {
    const std::string csv = dir + "/attn-train-loss.csv", png = dir + "/attn-train-loss.png";
    FILE *f = std::fopen(csv.c_str(), "w");
    if (!f) {
        std::printf("loss curves: cannot write %s\n", csv.c_str());
        return;
    }
    std::fprintf(f, "step,loss_full,loss_window\n");
    for (const curve_point &p : c) std::fprintf(f, "%d,%.6f,%.6f\n", p.step, p.loss_full, p.loss_window);
    std::fclose(f);
    std::printf("loss curves: %s\n", csv.c_str());
    const std::string script =
        "import sys, csv\n"
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "rows = list(csv.DictReader(open(sys.argv[1])))\n"
        "s = [int(r['step']) for r in rows]\n"
        "plt.figure(figsize=(7, 4))\n"
        "plt.plot(s, [float(r['loss_full']) for r in rows], label='full causal attention')\n"
        "plt.plot(s, [float(r['loss_window']) for r in rows], label='window of " +
        std::to_string(window) +
        " tokens')\n"
        "plt.xlabel('step'); plt.ylabel('training loss (cross-entropy)'); plt.yscale('log')\n"
        "plt.title('associative recall'); plt.legend(); plt.tight_layout()\n"
        "plt.savefig(sys.argv[2], dpi=100)\n";
    const std::string py = dir + "/attn-train-plot.py";
    if (FILE *s = std::fopen(py.c_str(), "w")) {
        std::fputs(script.c_str(), s);
        std::fclose(s);
    }
    if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
        std::printf("loss curves: PNG skipped (/usr/bin/python3 with matplotlib not found)\n");
        return;
    }
    const std::string cmd = "/usr/bin/python3 " + py + " " + csv + " " + png + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0)
        std::printf("loss curves: %s\n", png.c_str());
    else
        std::printf("loss curves: PNG skipped (the matplotlib script failed)\n");
}

int run(const options &o) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.num_threads = o.threads;
    attn_context *ctx = nullptr;
    if (attn_context_create(&cfg, &ctx) != ATTN_OK) {
        std::fprintf(stderr, "attn-train: %s\n", attn_last_error());
        return 1;
    }
    const task t;
    model full, windowed;
    full.init(t, 64, 2, 0, o.seed);
    windowed.init(t, 64, 2, o.window, o.seed);
    full.dtype = windowed.dtype = o.dtype;
    std::mt19937 gen(o.seed * 2654435761u + 7u);
    const batch held_out = sample_batch(t, 2000, gen);
    std::printf("attn-train: associative recall, %d keys, %d values, %d pairs (length %d), "
                "d_model %d, %d heads, batch %d, %s attention, seed %u, isa %s, %d threads\n",
                t.keys, t.values, t.pairs, t.length(), full.d_model, full.heads, o.batch,
                o.dtype == ATTN_DTYPE_BF16 ? "bf16" : "f32", o.seed,
                attn_context_isa(ctx), attn_context_num_threads(ctx));
    // the window holds the last w tokens; a value position also carries its key (the
    // previous-token embedding), so it sees the last w / 2 pairs whole
    const double seen = std::min(1.0, double(o.window / 2) / t.pairs);
    std::printf("chance: %.1f%%; a window of %d tokens sees the answer's pair in %.1f%% of the "
                "sequences: at best about %.1f%% accuracy\n",
                100.0 / t.values, o.window, 100.0 * seen,
                100.0 * (seen + (1.0 - seen) / t.values));

    {  // gradients against central differences, once, on a small batch, in f32 (bf16's
       // rounding of the loss would swamp the differences)
        std::mt19937 g2(o.seed + 99u);
        const batch small = sample_batch(t, 8, g2);
        model full32 = full, windowed32 = windowed;
        full32.dtype = windowed32.dtype = ATTN_DTYPE_F32;
        const double e_full = gradient_check(ctx, full32, small, g2);
        const double e_win = gradient_check(ctx, windowed32, small, g2);
        std::printf("gradient check (central differences, h = 1e-2, 6 coordinates of each of 8 "
                    "tensors): max relative error %.2e (full), %.2e (windowed)\n",
                    e_full, e_win);
    }

    adam opt_full, opt_win;
    std::vector<curve_point> curve;
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    double loss_full = 0.0, loss_win = 0.0, acc_full = 0.0, acc_win = 0.0;
    int step = 0;
    const int report_every = o.quick ? 100 : 200;
    for (step = 1; step <= o.steps; ++step) {
        const batch b = sample_batch(t, o.batch, gen);
        loss_full = full.run(ctx, b, true, nullptr);
        opt_full.update(full.params());
        loss_win = windowed.run(ctx, b, true, nullptr);
        opt_win.update(windowed.params());
        if (step % 10 == 0) curve.push_back({step, loss_full, loss_win});
        const bool last = step == o.steps || (o.seconds > 0.0 && elapsed() > o.seconds);
        if (step % report_every == 0 || last) {
            full.run(ctx, held_out, false, &acc_full);
            windowed.run(ctx, held_out, false, &acc_win);
            std::printf("step %5d  loss %.4f  held-out accuracy %5.1f%%   | windowed: loss %.4f  "
                        "accuracy %5.1f%%   %.1f steps/s\n",
                        step, loss_full, 100.0 * acc_full, loss_win, 100.0 * acc_win,
                        step / elapsed());
            std::fflush(stdout);
        }
        if (last) break;
    }
    std::printf("\nafter %d steps (%.1f s):   full causal attention %5.1f%%   |   window of %d "
                "tokens %5.1f%%   (chance %.1f%%)\n\n",
                step, elapsed(), 100.0 * acc_full, o.window, 100.0 * acc_win, 100.0 / t.values);

    // an example whose answer lies far outside the window
    int ex = 0;
    while (ex + 1 < held_out.count && held_out.source[size_t(ex)] > t.length() / 2) ++ex;
    for (int h = 0; h < full.heads; ++h) {
        const std::string title = "learned attention, full model, head " + std::to_string(h) +
                                  ", held-out sequence " + std::to_string(ex);
        print_heat_map(t, held_out, ex, full.attention_weights(ctx, held_out, ex, h), title.c_str());
    }
    std::printf("\n");
    write_curves(o.out, curve, o.window);
    attn_context_destroy(ctx);

    int status = 0;
    if (acc_full < 0.98 && !o.quick && o.max_loss < 0.0) {
        std::printf("attn-train: held-out accuracy %.1f%% is below 98%%\n", 100.0 * acc_full);
        status = 1;
    }
    if (o.max_loss >= 0.0) {
        const bool ok = loss_full < o.max_loss;
        std::printf("attn-train: final training loss %.4f %s %.4f\n", loss_full,
                    ok ? "<" : ">=", o.max_loss);
        if (!ok) status = 1;
    }
    return status;
}

}  // namespace
}  // namespace attn_train

int main(int argc, char **argv) {
    attn_train::options o;
    if (!attn_train::parse(argc, argv, o)) return 2;
    return attn_train::run(o);
}
