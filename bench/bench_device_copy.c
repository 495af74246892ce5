/* Moves between two OpenCL devices (PoCL: POCL_DEVICES="pthread pthread"), run as it is and
 * with KILN_OPENCL_SHARED_CONTEXT=0 (a context per device: the move goes through the host).
 * move_ms: one kiln_to_device of a --mib MiB f32 tensor from device 0 to device 1 and a read of
 * one element of it, median of --runs. pingpong_ms: --rounds rounds of a chain of --steps
 * products on device 0, its result moved to device 1, a product there, moved back, all queued
 * before one read at the end (median of --runs): through the host each move holds an engine
 * thread until the source device is done; as a device copy it is enqueued and the thread goes
 * on. held_ms (run with KILN_ENGINE_THREADS=1 KILN_FUSION=0): device 0 given a chain of
 * products of 1024 x 1024 (chain_ms to its result alone), its result moved to device 1, then 5
 * ms later a tiny CPU op dispatched and left unread while this thread sleeps: how long after its dispatch
 * the one engine thread started it (the profiler's start - dispatch), i.e. how long the move
 * held the thread. */
#include <unistd.h>

#include "bench.h"

static double arg_num(int argc, char **argv, const char *flag, double fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], flag) == 0) return atof(argv[i + 1]);
    return fallback;
}

/* A chain of products of size x size on dev (what keeps it busy). */
static kiln_tensor busy_chain(kiln_device dev, int steps, int64_t size) {
    kiln_tensor w = kiln_mul_scalar(kiln_ones(dev, KILN_F32, KILN_SHAPE(size, size)), 1.0 / (double)size);
    kiln_tensor x = kiln_ones(dev, KILN_F32, KILN_SHAPE(size, size));
    for (int i = 0; i < steps; i++) x = kiln_matmul(x, kiln_ref(w));
    kiln_release(w);
    return x;
}

static void read_one(kiln_tensor t) {
    float v;
    bench_check(kiln_into_scalar(kiln_sum(kiln_narrow(t, 0, 0, 1)), &v), "read");
}

int main(int argc, char **argv) {
    if (kiln_device_count(KILN_KIND_OPENCL) < 2) {
        fprintf(stderr, "needs two OpenCL devices (PoCL: POCL_DEVICES=\"pthread pthread\")\n");
        return 2;
    }
    int runs = bench_runs(argc, argv, 9);
    int64_t n = (int64_t)(arg_num(argc, argv, "--mib", 16) * (1 << 20) / 4);
    int steps = (int)arg_num(argc, argv, "--steps", 4), rounds = (int)arg_num(argc, argv, "--rounds", 8);
    kiln_device d0 = kiln_opencl_device(0), d1 = kiln_opencl_device(1);
    double *move = malloc(sizeof(double) * (size_t)runs), *pingpong = malloc(sizeof(double) * (size_t)runs),
           *chain = malloc(sizeof(double) * (size_t)runs), *held = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor cpu = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(8));
    kiln_tensor src = kiln_ones(d0, KILN_F32, KILN_SHAPE(n));
    kiln_tensor w1 = kiln_mul_scalar(kiln_ones(d1, KILN_F32, KILN_SHAPE(384, 384)), 1.0 / 384);
    for (int r = -1; r < runs; r++) { /* (-1: warm-up, programs and buffers) */
        bench_check(kiln_sync_all(), "sync");
        double t0 = bench_now_ms();
        read_one(kiln_to_device(kiln_ref(src), d1));
        double t1 = bench_now_ms();
        kiln_tensor x = busy_chain(d0, steps, 384);
        for (int k = 0; k < rounds; k++) {
            kiln_tensor y = kiln_matmul(kiln_to_device(x, d1), kiln_ref(w1));
            x = kiln_add(kiln_to_device(y, d0), busy_chain(d0, steps, 384));
        }
        read_one(x);
        double t2 = bench_now_ms();
        read_one(busy_chain(d0, 8, 1024));
        double t3 = bench_now_ms();
        bench_check(kiln_sync_all(), "sync");
        kiln_profiler_start();
        kiln_tensor moved = kiln_to_device(busy_chain(d0, 8, 1024), d1);
        usleep(5000); /* the engine thread has enqueued the chain and taken up the move */
        kiln_tensor tiny = kiln_add_scalar(kiln_ref(cpu), 1);
        usleep((useconds_t)((t3 - t2) * 2000)); /* twice the chain's time: the engine thread is free by then */
        read_one(tiny);
        read_one(moved);
        kiln_profiler_stop();
        kiln_profile_event ev[256];
        size_t n_ev = kiln_profiler_events(ev, 256);
        double held_at = -1;
        for (size_t i = 0; i < n_ev && i < 256; i++)
            if (strcmp(ev[i].op, "kiln_add_scalar") == 0 && !ev[i].on_device) held_at = ev[i].start_us - ev[i].dispatch_us;
        if (r >= 0) move[r] = t1 - t0, pingpong[r] = t2 - t1, chain[r] = t3 - t2, held[r] = held_at / 1e3;
    }
    kiln_release(src), kiln_release(w1), kiln_release(cpu);
    const char *shared = getenv("KILN_OPENCL_SHARED_CONTEXT");
    char extra[256];
    snprintf(extra, sizeof extra, ",\"mib\":%.1f,\"pingpong_ms\":%.2f,\"chain_ms\":%.2f,\"held_ms\":%.2f,\"path\":\"%s\"",
             (double)n * 4 / (1 << 20), bench_quantile(pingpong, runs, 0.5), bench_quantile(chain, runs, 0.5),
             bench_quantile(held, runs, 0.5), shared && shared[0] == '0' ? "host" : "device");
    bench_report("device_copy", bench_quantile(move, runs, 0.5), extra);
    free(move), free(pingpong), free(chain), free(held);
    return 0;
}
