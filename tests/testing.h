// testing.h: the tiny test protocol shared by the C test programs. Each check
// prints "PASS: name" or "FAIL: name (why)"; tests/run_tests.sh counts them.
// A test program exits 1 if any of its checks failed.
#ifndef LLMC_TESTING_H
#define LLMC_TESTING_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static int test_failures = 0;

static void test_result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void test_result(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "PASS: " : "FAIL: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
    if (!ok) test_failures++;
}

static void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
}

// max |a - b| / max(max |b|, floor): a scale-aware relative error of a tensor.
static double rel_error(const float *a, const float *b, long n, double floor) {
    double max_diff = 0, max_ref = floor;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > max_diff || d != d) max_diff = d != d ? INFINITY : d;
        if (fabs((double)b[i]) > max_ref) max_ref = fabs((double)b[i]);
    }
    return max_diff / max_ref;
}

static int test_exit_code(void) { return test_failures ? 1 : 0; }

#endif  // LLMC_TESTING_H
