// anvil's CPU GEMM against OpenBLAS's cblas_sgemm, measured in the same run at the same thread count: square
// products (256..2048) and the skinny ones of LLM decoding (M = 1..8 rows against 768..4096-wide weights).
// Prints GFLOP/s for both and the ratio anvil/OpenBLAS (best of several repetitions each), and checks that
// the two results agree. OpenBLAS is loaded with dlopen, so nothing links against it; without it the bench
// says so and exits 0. Usage: bench_gemm [--threads N] [--quick] [--busy]   (default: 1 and 2 threads, full
// set, best of 3 rounds; --quick: a few shapes, one round, for a CI smoke run; --busy: a second process
// spins on one core throughout, as another program would, and the table of N threads against 1 shows whether
// the pool waits on a worker that is not running — issue 41's bar is no shape below 1.00x)
#include <anvil/backend/cpu/gemm.hpp>

#include <dlfcn.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

// cblas.h's values; Debian's libopenblas0 uses 32-bit integers (the 64-bit one is libopenblas64).
constexpr int cblas_row_major = 101;
constexpr int cblas_no_trans = 111;
using sgemm_function = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                                const float* a, int lda, const float* b, int ldb, float beta, float* c,
                                int ldc);
using set_threads_function = void (*)(int);
using get_name_function = char* (*)();

struct openblas {
    sgemm_function sgemm = nullptr;
    set_threads_function set_threads = nullptr;
    get_name_function core_name = nullptr;
    get_name_function config = nullptr;
};

struct shape {
    std::int64_t m, n, k;
};

struct timing {
    double anvil_seconds = 1e30;
    double openblas_seconds = 1e30;
};

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of several samples; a sample repeats the call until it lasts a few milliseconds, so small products
// are not timed at the clock's resolution. The two libraries alternate, so both see the same machine load.
template <class Anvil, class Blas>
timing measure(Anvil&& run_anvil, Blas&& run_blas, bool quick) {
    run_anvil();  // warm-up: packing buffers, thread start, page faults
    run_blas();
    const double start = now_seconds();
    run_anvil();
    const double once = std::max(now_seconds() - start, 1e-7);
    const int inner = std::max(1, static_cast<int>(0.003 / once));
    const int samples = quick ? 3 : (once > 0.05 ? 5 : 11);
    timing best;
    for (int sample = 0; sample < samples; ++sample) {
        double begin = now_seconds();
        for (int i = 0; i < inner; ++i)
            run_anvil();
        best.anvil_seconds = std::min(best.anvil_seconds, (now_seconds() - begin) / inner);
        begin = now_seconds();
        for (int i = 0; i < inner; ++i)
            run_blas();
        best.openblas_seconds = std::min(best.openblas_seconds, (now_seconds() - begin) / inner);
    }
    return best;
}

// max |a - b| / max |b|: both sum in different orders, so they agree to a few float ulps of the largest
// value.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double largest = 0, difference = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        largest = std::max(largest, std::fabs(static_cast<double>(b[i])));
        difference = std::max(difference, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    }
    return largest > 0 ? difference / largest : difference;
}

// Starts a process that spins until killed: the competing load of --busy. A process, not a thread, so the
// scheduler shares the cores between it and the bench as it would with another program. Returns its pid.
pid_t start_busy_process() {
    const pid_t child = fork();
    if (child == 0) {
#if defined(__linux__)
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the bench
#endif
        for (;;)
            __asm__ __volatile__("" ::: "memory");  // a loop the compiler must keep
    }
    return child;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> thread_counts{1, 2};
    bool quick = false, busy = false;
    for (int i = 1; i < argc; ++i) {
        const std::string argument = argv[i];
        if (argument == "--quick") {
            quick = true;
        } else if (argument == "--busy") {
            busy = true;
        } else if (argument == "--threads" && i + 1 < argc) {
            thread_counts = {std::atoi(argv[++i])};
            if (thread_counts[0] < 1) {
                std::fprintf(stderr, "bench_gemm: --threads needs a count of at least 1\n");
                return EXIT_FAILURE;
            }
        } else {
            std::fprintf(stderr, "usage: bench_gemm [--threads N] [--quick] [--busy]\n");
            return EXIT_FAILURE;
        }
    }

    // These variables (set on the build machines) pin OpenBLAS to a weaker kernel and cache size; the
    // baseline must run at its best, so they go before OpenBLAS reads them at load time.
    for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}) {
        if (const char* value = std::getenv(name)) {
            std::printf("unsetting %s=%s so OpenBLAS picks its own kernel\n", name, value);
            unsetenv(name);
        } else {
            std::printf("%s not set (OpenBLAS picks its own kernel)\n", name);
        }
    }
    void* library = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
        std::printf("skipped: libopenblas.so.0 not found (%s); install libopenblas0-pthread\n", dlerror());
        return EXIT_SUCCESS;
    }
    openblas blas;
    blas.sgemm = reinterpret_cast<sgemm_function>(dlsym(library, "cblas_sgemm"));
    blas.set_threads = reinterpret_cast<set_threads_function>(dlsym(library, "openblas_set_num_threads"));
    blas.core_name = reinterpret_cast<get_name_function>(dlsym(library, "openblas_get_corename"));
    blas.config = reinterpret_cast<get_name_function>(dlsym(library, "openblas_get_config"));
    if (blas.sgemm == nullptr || blas.set_threads == nullptr) {
        std::printf("skipped: libopenblas.so.0 lacks cblas_sgemm or openblas_set_num_threads\n");
        return EXIT_SUCCESS;
    }
    std::printf("OpenBLAS: %s, core %s\n", blas.config != nullptr ? blas.config() : "?",
                blas.core_name != nullptr ? blas.core_name() : "?");
    std::printf("anvil kernel: %s\n", anvil::detail::gemm_isa_name(anvil::detail::best_gemm_isa()));

    std::vector<shape> shapes;
    for (const std::int64_t size : {256, 512, 1024, 2048}) {
        if (quick && size > 512) continue;
        shapes.push_back({size, size, size});
    }
    const std::int64_t skinny_k_n[][2] = {{768, 768}, {768, 3072}, {3072, 768}, {4096, 4096}};
    for (const std::int64_t m : {1, 2, 4, 8}) {
        for (const auto& k_n : skinny_k_n) {
            if (quick && (m == 2 || m == 4 || k_n[0] == 4096)) continue;
            shapes.push_back({m, k_n[1], k_n[0]});
        }
    }

    // Every shape is measured in `rounds` passes over the whole list, keeping the best of all its samples:
    // on a shared machine, the samples of one shape are then spread over minutes, not a second.
    const int rounds = quick ? 1 : 3;
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    pid_t busy_child = -1;
    if (busy) {
        busy_child = start_busy_process();
        if (busy_child < 0) {
            std::fprintf(stderr, "bench_gemm: --busy: could not start the spinning process\n");
            return EXIT_FAILURE;
        }
        std::printf("busy: process %d spins on one core throughout the measurement\n",
                    static_cast<int>(busy_child));
    }
    // One pool per thread count, and every shape measured at each count in turn, so that the counts compared
    // see the same load on the machine.
    std::vector<std::unique_ptr<anvil::thread_pool>> pools;
    for (const int threads : thread_counts)
        pools.push_back(std::make_unique<anvil::thread_pool>(static_cast<std::size_t>(threads)));
    std::vector<std::vector<timing>> best(thread_counts.size(), std::vector<timing>(shapes.size()));
    std::vector<std::vector<double>> differences(thread_counts.size(),
                                                 std::vector<double>(shapes.size(), 0.0));
    for (int round = 0; round < rounds; ++round) {
        for (std::size_t index = 0; index < shapes.size(); ++index) {
            const shape& s = shapes[index];
            std::mt19937 random(static_cast<unsigned>(index));
            std::vector<float> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>(s.k * s.n));
            for (float& value : a)
                value = uniform(random);
            for (float& value : b)
                value = uniform(random);
            std::vector<float> c_anvil(static_cast<std::size_t>(s.m * s.n)), c_blas(c_anvil.size());
            const anvil::detail::matrix_operand a_operand{a.data(), anvil::dtype::f32, s.k, 1};
            const anvil::detail::matrix_operand b_operand{b.data(), anvil::dtype::f32, s.n, 1};
            for (std::size_t t = 0; t < thread_counts.size(); ++t) {
                blas.set_threads(thread_counts[t]);
                anvil::thread_pool& pool = *pools[t];
                const timing sample = measure(
                    [&] {
                        anvil::detail::gemm(s.m, s.n, s.k, a_operand, b_operand, c_anvil.data(), s.n, {},
                                            &pool);
                    },
                    [&] {
                        blas.sgemm(cblas_row_major, cblas_no_trans, cblas_no_trans, static_cast<int>(s.m),
                                   static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, a.data(),
                                   static_cast<int>(s.k), b.data(), static_cast<int>(s.n), 0.0f,
                                   c_blas.data(), static_cast<int>(s.n));
                    },
                    quick);
                best[t][index].anvil_seconds = std::min(best[t][index].anvil_seconds, sample.anvil_seconds);
                best[t][index].openblas_seconds =
                    std::min(best[t][index].openblas_seconds, sample.openblas_seconds);
                differences[t][index] = std::max(differences[t][index], relative_difference(c_anvil, c_blas));
            }
        }
    }
    if (busy_child > 0) {
        kill(busy_child, SIGKILL);
        waitpid(busy_child, nullptr, 0);
    }

    bool all_agree = true;
    double worst_ratio = 1e30;
    const auto gflops = [&](const shape& s, double seconds) {
        return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) /
               seconds * 1e-9;
    };
    for (std::size_t t = 0; t < thread_counts.size(); ++t) {
        const int threads = thread_counts[t];
        std::printf("\n%d thread%s%s (best of %d round%s)\n%6s %6s %6s  %12s %12s  %7s  %9s\n", threads,
                    threads == 1 ? "" : "s", busy ? ", one core busy" : "", rounds, rounds == 1 ? "" : "s",
                    "M", "N", "K", "anvil GF/s", "OpenBLAS", "ratio", "rel.diff");
        for (std::size_t index = 0; index < shapes.size(); ++index) {
            const shape& s = shapes[index];
            const double ratio = best[t][index].openblas_seconds / best[t][index].anvil_seconds;
            const bool agree = differences[t][index] < 1e-5;
            all_agree = all_agree && agree;
            worst_ratio = std::min(worst_ratio, ratio);
            std::printf("%6lld %6lld %6lld  %12.1f %12.1f  %6.2fx  %9.1e%s\n", static_cast<long long>(s.m),
                        static_cast<long long>(s.n), static_cast<long long>(s.k),
                        gflops(s, best[t][index].anvil_seconds), gflops(s, best[t][index].openblas_seconds),
                        ratio, differences[t][index], agree ? "" : "  MISMATCH");
        }
    }
    // Each count against the first (1 thread by default): below 1.00x, more threads made the product slower.
    for (std::size_t t = 1; t < thread_counts.size(); ++t) {
        std::printf("\n%d threads against %d%s: time at %d / time at %d\n%6s %6s %6s  %7s %9s\n",
                    thread_counts[t], thread_counts[0], busy ? ", one core busy" : "", thread_counts[0],
                    thread_counts[t], "M", "N", "K", "anvil", "OpenBLAS");
        double slowest = 1e30;
        std::size_t slowest_index = 0;
        for (std::size_t index = 0; index < shapes.size(); ++index) {
            const shape& s = shapes[index];
            const double anvil_speedup = best[0][index].anvil_seconds / best[t][index].anvil_seconds;
            const double blas_speedup = best[0][index].openblas_seconds / best[t][index].openblas_seconds;
            if (anvil_speedup < slowest) {
                slowest = anvil_speedup;
                slowest_index = index;
            }
            std::printf("%6lld %6lld %6lld  %6.2fx %8.2fx\n", static_cast<long long>(s.m),
                        static_cast<long long>(s.n), static_cast<long long>(s.k), anvil_speedup,
                        blas_speedup);
        }
        const shape& s = shapes[slowest_index];
        std::printf("slowest anvil speed-up at %d threads: %.2fx (M=%lld N=%lld K=%lld)\n", thread_counts[t],
                    slowest, static_cast<long long>(s.m), static_cast<long long>(s.n),
                    static_cast<long long>(s.k));
    }
    std::fflush(stdout);
    std::printf("\nworst ratio anvil/OpenBLAS: %.2fx; results %s\n", worst_ratio,
                all_agree ? "agree" : "DIFFER");
    return all_agree ? EXIT_SUCCESS : EXIT_FAILURE;
}
