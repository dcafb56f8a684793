/* Plain C fminsearch reference for the issue-22 noisy-curve comparison.
 *
 * Nelder-Mead exactly as MATLAB's fminsearch (Lagarias et al., SIAM J Optim 1998;9:112):
 * initial simplex x0 and x0 + 5% of each component (0.00025 for a zero component),
 * reflection 1, expansion 2, contraction 0.5, shrink 0.5, the same branch order
 * (expand if fr < f1, accept reflection if fr < fn, outside contraction if fr < f(n+1)
 * (accepted if fc <= fr), inside contraction otherwise (accepted if fcc < f(n+1)), else
 * shrink), a stable sort of the vertices after every iteration, and fminsearch's stopping
 * rule: max |f1 - fj| <= max(TolFun, 10 eps(f1)) and max |x1 - xj| <= max(TolX, 10 eps(max x1)),
 * or MaxIter iterations, or MaxFunEvals evaluations. Defaults TolX = TolFun = 1e-4,
 * MaxIter = MaxFunEvals = 200 n (override with --maxfac K: K n).
 *
 * Model: the same as biogpu's definition (docs/perfusion.md), in the same parameter units
 * (ml/100g/min and s; 1/min, fractions and s), written independently: the delayed inputs
 * are the frame samples linearly interpolated at t_i - tau (the first sample before the
 * start, the last after the end) and the convolution with exp(-k t) is the exact integral of
 * the piecewise-linear interpolant of its argument over each frame interval (the
 * "exponential convolution of a linear interpolant", as dcmri's expconv), any time grid.
 *
 * Bounds: as fminsearch users do it, a trial point outside the box (biogpu's default
 * bounds) costs +inf (a barrier), so the simplex never leaves it. Cost: sum of squares.
 *
 * Usage: fminsearch MODEL CURVES.csv INPUTS.csv OUT.csv [--maxfac K] [--start a,b,c...]
 *   MODEL: dual-input | extended-tofts | tofts; INPUTS.csv columns time,aif[,pv]
 * Output: curve,<params>,sse,iterations,evals,exitflag (1 converged, 0 capped)
 * Build: cc -O2 -o fminsearch fminsearch.c -lm
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXP 8
#define MAXT 4096
#define MAXLINE (1 << 22)

static int nt;
static double tm[MAXT], aif[MAXT], pvf[MAXT], y[MAXT];
static int model; /* 0 dual-input, 1 extended-tofts, 2 tofts */
static int np;
static double lo[MAXP], hi[MAXP];

/* linear interpolation of samples f at time s (clamped to the first/last sample) */
static double interp(const double *f, double s) {
    if (s <= tm[0]) return f[0];
    if (s >= tm[nt - 1]) return f[nt - 1];
    int a = 0, b = nt - 1;
    while (b - a > 1) {
        int m = (a + b) / 2;
        if (tm[m] <= s) a = m; else b = m;
    }
    double w = (s - tm[a]) / (tm[b] - tm[a]);
    return f[a] + w * (f[b] - f[a]);
}

/* weights of f[i] and f[i+1] in int_{t_i}^{t_i+h} f(s) exp(-k (t_i + h - s)) ds, f linear */
static void weights(double k, double h, double *wa, double *wb) {
    double x = k * h;
    if (x < 1e-3) {
        *wa = h * (0.5 - x / 3.0 + x * x / 8.0 - x * x * x / 30.0);
        *wb = h * (0.5 - x / 6.0 + x * x / 24.0 - x * x * x / 120.0);
    } else {
        double e = exp(-x);
        *wa = h * (1.0 - e - x * e) / (x * x);
        *wb = h * (x - 1.0 + e) / (x * x);
    }
}

/* out[i] = int_{t0}^{t_i} f(s) exp(-k (t_i - s)) ds */
static void expconv(const double *f, double k, double *out) {
    out[0] = 0.0;
    for (int i = 0; i + 1 < nt; i++) {
        double h = tm[i + 1] - tm[i], wa, wb;
        weights(k, h, &wa, &wb);
        out[i + 1] = exp(-k * h) * out[i] + wa * f[i] + wb * f[i + 1];
    }
}

static long nevals;

static double cost(const double *p) {
    nevals++;
    for (int j = 0; j < np; j++)
        if (!(p[j] >= lo[j] && p[j] <= hi[j])) return HUGE_VAL;
    static double f[MAXT], c[MAXT];
    double sse = 0.0;
    if (model == 0) {
        double ka = p[0] / 6000.0, kp = p[1] / 6000.0, kl = p[2] / 6000.0;
        for (int i = 0; i < nt; i++)
            f[i] = ka * interp(aif, tm[i] - p[3]) + kp * interp(pvf, tm[i] - p[4]);
        expconv(f, kl, c);
    } else {
        double kt = p[0] / 60.0, ve = p[1], vp = model == 1 ? p[2] : 0.0, tau = p[np - 1];
        static double ca[MAXT];
        for (int i = 0; i < nt; i++) {
            ca[i] = interp(aif, tm[i] - tau);
            f[i] = kt * ca[i];
        }
        expconv(f, kt / ve, c);
        for (int i = 0; i < nt; i++) c[i] += vp * ca[i];
    }
    for (int i = 0; i < nt; i++) {
        double r = c[i] - y[i];
        sse += r * r;
    }
    return sse;
}

/* fminsearch; returns exitflag (1 converged, 0 capped); x in/out */
static int fminsearch(double *x, double *fval, int *iters, long maxiter, long maxfun) {
    const double rho = 1, chi = 2, psi = 0.5, sigma = 0.5, tolx = 1e-4, tolf = 1e-4;
    int n = np;
    double v[MAXP + 1][MAXP], fv[MAXP + 1];
    double xbar[MAXP], xr[MAXP], xe[MAXP], xc[MAXP], xcc[MAXP];
    nevals = 0;
    for (int j = 0; j < n; j++) v[0][j] = x[j];
    fv[0] = cost(x);
    for (int j = 0; j < n; j++) {
        double yv[MAXP];
        memcpy(yv, x, sizeof(double) * n);
        yv[j] = yv[j] != 0 ? 1.05 * yv[j] : 0.00025;
        memcpy(v[j + 1], yv, sizeof(double) * n);
        fv[j + 1] = cost(yv);
    }
    /* stable sort (insertion) */
#define SORT()                                                                  \
    for (int a = 1; a <= n; a++) {                                              \
        double fa = fv[a], va[MAXP];                                            \
        memcpy(va, v[a], sizeof(double) * n);                                   \
        int b = a - 1;                                                          \
        while (b >= 0 && fv[b] > fa) {                                          \
            fv[b + 1] = fv[b];                                                  \
            memcpy(v[b + 1], v[b], sizeof(double) * n);                         \
            b--;                                                                \
        }                                                                       \
        fv[b + 1] = fa;                                                         \
        memcpy(v[b + 1], va, sizeof(double) * n);                               \
    }
    SORT();
    int itercount = 1;
    int flag = 0;
    while (nevals < maxfun && itercount < maxiter) {
        double df = 0, dx = 0, mx = 0;
        for (int j = 1; j <= n; j++) df = fmax(df, fabs(fv[0] - fv[j]));
        for (int j = 1; j <= n; j++)
            for (int k = 0; k < n; k++) dx = fmax(dx, fabs(v[j][k] - v[0][k]));
        for (int k = 0; k < n; k++) mx = k == 0 ? v[0][0] : fmax(mx, v[0][k]);
        double epsf = fv[0] != 0 && isfinite(fv[0]) ? nextafter(fabs(fv[0]), INFINITY) - fabs(fv[0]) : DBL_MIN;
        double epsx = nextafter(fabs(mx), INFINITY) - fabs(mx);
        if (df <= fmax(tolf, 10 * epsf) && dx <= fmax(tolx, 10 * epsx)) {
            flag = 1;
            break;
        }
        for (int k = 0; k < n; k++) {
            double s = 0;
            for (int j = 0; j < n; j++) s += v[j][k];
            xbar[k] = s / n;
        }
        for (int k = 0; k < n; k++) xr[k] = (1 + rho) * xbar[k] - rho * v[n][k];
        double fxr = cost(xr);
        if (fxr < fv[0]) {
            for (int k = 0; k < n; k++) xe[k] = (1 + rho * chi) * xbar[k] - rho * chi * v[n][k];
            double fxe = cost(xe);
            if (fxe < fxr) {
                memcpy(v[n], xe, sizeof(double) * n);
                fv[n] = fxe;
            } else {
                memcpy(v[n], xr, sizeof(double) * n);
                fv[n] = fxr;
            }
        } else if (fxr < fv[n - 1]) {
            memcpy(v[n], xr, sizeof(double) * n);
            fv[n] = fxr;
        } else {
            int shrink = 0;
            if (fxr < fv[n]) {
                for (int k = 0; k < n; k++) xc[k] = (1 + psi * rho) * xbar[k] - psi * rho * v[n][k];
                double fxc = cost(xc);
                if (fxc <= fxr) {
                    memcpy(v[n], xc, sizeof(double) * n);
                    fv[n] = fxc;
                } else
                    shrink = 1;
            } else {
                for (int k = 0; k < n; k++) xcc[k] = (1 - psi) * xbar[k] + psi * v[n][k];
                double fxcc = cost(xcc);
                if (fxcc < fv[n]) {
                    memcpy(v[n], xcc, sizeof(double) * n);
                    fv[n] = fxcc;
                } else
                    shrink = 1;
            }
            if (shrink) {
                for (int j = 1; j <= n; j++) {
                    for (int k = 0; k < n; k++) v[j][k] = v[0][k] + sigma * (v[j][k] - v[0][k]);
                    fv[j] = cost(v[j]);
                }
            }
        }
        SORT();
        itercount++;
    }
    memcpy(x, v[0], sizeof(double) * n);
    *fval = fv[0];
    *iters = itercount;
    return flag;
}

/* CSV reading: header + rows of numbers */
static char *line;
static int split(char *s, char **f, int maxf) {
    int n = 0;
    f[n++] = s;
    for (char *p = s; *p; p++) {
        if (*p == ',') {
            *p = 0;
            if (n < maxf) f[n++] = p + 1;
        } else if (*p == '\n' || *p == '\r')
            *p = 0;
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: fminsearch MODEL CURVES.csv INPUTS.csv OUT.csv [--maxfac K] [--start a,b,...]\n");
        return 2;
    }
    const char *names[3][5] = {{"ka", "kp", "kl", "tau_a", "tau_p"},
                               {"ktrans", "ve", "vp", "tau", 0},
                               {"ktrans", "ve", "tau", 0, 0}};
    double start[3][5] = {{10, 80, 200, 2, 3}, {0.2, 0.3, 0.05, 1, 0}, {0.2, 0.3, 1, 0, 0}};
    double lob[3][5] = {{0, 0, 0, -30, -30}, {0, 0.001, 0, -30, 0}, {0, 0.001, -30, 0, 0}};
    double hib[3][5] = {{2000, 2000, 10000, 30, 30}, {5, 1, 1, 30, 0}, {5, 1, 30, 0, 0}};
    if (!strcmp(argv[1], "dual-input")) model = 0, np = 5;
    else if (!strcmp(argv[1], "extended-tofts")) model = 1, np = 4;
    else if (!strcmp(argv[1], "tofts")) model = 2, np = 3;
    else {
        fprintf(stderr, "unknown model %s\n", argv[1]);
        return 2;
    }
    long maxfac = 200;
    double x0[MAXP];
    for (int j = 0; j < np; j++) x0[j] = start[model][j], lo[j] = lob[model][j], hi[j] = hib[model][j];
    for (int a = 5; a < argc; a++) {
        if (!strcmp(argv[a], "--maxfac") && a + 1 < argc) maxfac = atol(argv[++a]);
        else if (!strcmp(argv[a], "--start") && a + 1 < argc) {
            char *s = argv[++a];
            for (int j = 0; j < np; j++) {
                x0[j] = strtod(s, &s);
                if (*s == ',') s++;
            }
        }
    }
    line = malloc(MAXLINE);
    static char *fld[100000];
    /* inputs */
    FILE *fi = fopen(argv[3], "r");
    if (!fi) { perror(argv[3]); return 1; }
    fgets(line, MAXLINE, fi);
    int n = 0;
    while (fgets(line, MAXLINE, fi) && n < MAXT) {
        int k = split(line, fld, 100000);
        if (k < 2) continue;
        tm[n] = atof(fld[0]);
        aif[n] = atof(fld[1]);
        pvf[n] = k > 2 ? atof(fld[2]) : 0;
        n++;
    }
    fclose(fi);
    nt = n;
    /* curves: time-major, first column time */
    FILE *fc = fopen(argv[2], "r");
    if (!fc) { perror(argv[2]); return 1; }
    fgets(line, MAXLINE, fc);
    char *hdr = strdup(line);
    static char *hf[100000];
    int ncol = split(hdr, hf, 100000);
    int ncurves = ncol - 1;
    double *data = malloc(sizeof(double) * ncurves * nt);
    int row = 0;
    while (row < nt && fgets(line, MAXLINE, fc)) {
        int k = split(line, fld, 100000);
        if (k != ncol) { fprintf(stderr, "bad row %d\n", row); return 1; }
        if (fabs(atof(fld[0]) - tm[row]) > 1e-9 * (1 + fabs(tm[row]))) {
            fprintf(stderr, "curve and input times differ at row %d\n", row);
            return 1;
        }
        for (int c = 0; c < ncurves; c++) data[(size_t)c * nt + row] = atof(fld[c + 1]);
        row++;
    }
    fclose(fc);
    if (row != nt) { fprintf(stderr, "curves have %d rows, inputs %d\n", row, nt); return 1; }
    FILE *fo = fopen(argv[4], "w");
    fprintf(fo, "curve");
    for (int j = 0; j < np; j++) fprintf(fo, ",%s", names[model][j]);
    fprintf(fo, ",sse,iterations,evals,exitflag\n");
    for (int c = 0; c < ncurves; c++) {
        memcpy(y, data + (size_t)c * nt, sizeof(double) * nt);
        double x[MAXP], fval;
        int it;
        memcpy(x, x0, sizeof(double) * np);
        int flag = fminsearch(x, &fval, &it, maxfac * np, maxfac * np);
        fprintf(fo, "%s", hf[c + 1]);
        for (int j = 0; j < np; j++) fprintf(fo, ",%.17g", x[j]);
        fprintf(fo, ",%.17g,%d,%ld,%d\n", fval, it, nevals, flag);
    }
    fclose(fo);
    return 0;
}
