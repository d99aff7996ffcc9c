// Printing with the seed's rounding (4 decimals) and a small shaded heat map of A.
#include <cmath>
#include <cstdio>
#include <string>

#include "demo.hpp"

namespace demo {

std::string fixed4(double x) {
    char buf[64];
    // A value that rounds to zero prints as 0.0000, never -0.0000.
    if (std::fabs(x) < 5e-5) x = 0.0;
    std::snprintf(buf, sizeof buf, "%.4f", x);
    return buf;
}

void print_matrix(const char *name, const matrix &m) {
    std::printf("%s =\n", name);
    for (int64_t i = 0; i < m.rows; ++i) {
        std::printf("    [");
        for (int64_t j = 0; j < m.cols; ++j) std::printf(" %7s", fixed4(m.at(i, j)).c_str());
        std::printf(" ]\n");
    }
}

void print_row(const matrix &m, int64_t i) {
    for (int64_t j = 0; j < m.cols; ++j)
        std::printf("%s%s", j ? " " : "", fixed4(m.at(i, j)).c_str());
}

const char *yes_no(bool b) { return b ? "True" : "False"; }

char shade(float w) {
    // Ten levels from blank (weight 0) to '@' (weight 1).
    static const char levels[] = " .:-=+*#%@";
    if (!(w > 0.0f)) return levels[0];
    if (w >= 1.0f) return levels[9];
    int level = static_cast<int>(std::lround(w * 9.0f));
    return levels[level];
}

void print_heat_map(const char *name, const matrix &a) {
    std::printf("%s as a heat map (shade by weight: ' .:-=+*#%%@' = 0 .. 1)\n", name);
    std::printf("            ");
    for (int64_t j = 0; j < a.cols; ++j)
        std::printf(" key%lld%s", static_cast<long long>(j + 1), j + 1 < a.cols ? " " : "");
    std::printf("\n");
    for (int64_t i = 0; i < a.rows; ++i) {
        std::printf("    query %lld ", static_cast<long long>(i + 1));
        for (int64_t j = 0; j < a.cols; ++j) {
            char c = shade(a.at(i, j));
            std::printf("|%c%c%c%c%c", c, c, c, c, c);
        }
        std::printf("|\n");
    }
}

bool matches_printed(const matrix &m, const matrix &printed) {
    if (m.rows != printed.rows || m.cols != printed.cols) return false;
    for (size_t i = 0; i < m.data.size(); ++i)
        if (!(std::fabs(static_cast<double>(m.data[i]) - printed.data[i]) <= 5e-5)) return false;
    return true;
}

}  // namespace demo
