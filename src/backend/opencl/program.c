/* OpenCL programs: built from generated source at run time, cached per device in memory (by
 * source) and on disk under $XDG_CACHE_HOME/kiln/opencl (else ~/.cache/kiln/opencl), one
 * file per program named by the hash of the source, the device and the driver version. A
 * cache file that is unreadable, truncated, for another source or refused by the driver is
 * ignored (and rewritten): the program is built from source. KILN_OPENCL_CACHE=0 turns the
 * disk cache off. Also: launching a kernel and waiting for it, and OpenCL error strings. */
#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

#define BUILD_OPTIONS "-cl-fp32-correctly-rounded-divide-sqrt"
#define MAGIC "KILNCL01"

const char *kiln__opencl_strerror(cl_int err) {
    switch (err) {
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    default: return "OpenCL error";
    }
}

kiln_status kiln__opencl_fail(cl_int err, const char *what) {
    kiln__kernel_error("%s failed: %s (%d)", what, kiln__opencl_strerror(err), (int)err);
    return err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY || err == CL_MEM_OBJECT_ALLOCATION_FAILURE
               ? KILN_ERR_OUT_OF_MEMORY
               : KILN_ERR_DEVICE;
}

kiln_status kiln__opencl_wait(cl_event ev, const char *what) {
    kiln__opencl_note_event(ev);
    cl_int err = clWaitForEvents(1, &ev);
    cl_int st = CL_COMPLETE;
    clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
    clReleaseEvent(ev);
    if (err != CL_SUCCESS) return kiln__opencl_fail(err, what);
    return st < 0 ? kiln__opencl_fail(st, what) : KILN_OK;
}

static int wait_each = -1;

kiln_status kiln__opencl_done(kiln__opencl_device *d, cl_event ev, const char *what) {
    kiln__opencl_note_event(ev);
    int w = __atomic_load_n(&wait_each, __ATOMIC_RELAXED);
    if (w < 0) {
        w = kiln__env_flag("KILN_SYNC", false) || kiln__env_flag("KILN_OPENCL_WAIT", false);
        __atomic_store_n(&wait_each, w, __ATOMIC_RELAXED);
    }
    if (w || atomic_fetch_add(&d->unwaited, 1) + 1 >= KILN__OPENCL_MAX_UNWAITED) {
        atomic_store(&d->unwaited, 0);
        return kiln__opencl_wait(ev, what);
    }
    clReleaseEvent(ev);
    return KILN_OK;
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t program_hash(const kiln__opencl_device *d, const char *source) {
    uint64_t h = 14695981039346656037ull;
    h = fnv1a(h, source, strlen(source) + 1);
    h = fnv1a(h, d->desc.name, strlen(d->desc.name) + 1);
    h = fnv1a(h, d->desc.driver, strlen(d->desc.driver) + 1);
    return fnv1a(h, BUILD_OPTIONS, sizeof BUILD_OPTIONS);
}

/* The cache file of a hash in *path; false when the disk cache is off or has no home. */
static bool cache_path(uint64_t hash, char *path, size_t cap, bool create) {
    const char *off = getenv("KILN_OPENCL_CACHE");
    if (off && strcmp(off, "0") == 0) return false;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[1024];
    int n;
    if (xdg && *xdg) n = snprintf(dir, sizeof dir, "%s/kiln", xdg);
    else if (home && *home) n = snprintf(dir, sizeof dir, "%s/.cache/kiln", home);
    else return false;
    if (n <= 0 || (size_t)n >= sizeof dir - 16) return false;
    if (create) {
        if (!xdg || !*xdg) { /* ~/.cache itself may be missing */
            char parent[1024];
            snprintf(parent, sizeof parent, "%s/.cache", home);
            mkdir(parent, 0700);
        }
        mkdir(dir, 0700);
        strcat(dir, "/opencl");
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) return false;
    } else {
        strcat(dir, "/opencl");
    }
    n = snprintf(path, cap, "%s/%016llx.bin", dir, (unsigned long long)hash);
    return n > 0 && (size_t)n < cap;
}

static cl_program build(kiln__opencl_device *d, cl_program p) {
    cl_int err = clBuildProgram(p, 1, &d->id, BUILD_OPTIONS, NULL, NULL);
    if (err == CL_SUCCESS) return p;
    const char *dump = getenv("KILN_OPENCL_DUMP"); /* debugging: the source that failed, on stderr */
    if (dump && strcmp(dump, "1") == 0) {
        size_t n = 0;
        clGetProgramInfo(p, CL_PROGRAM_SOURCE, 0, NULL, &n);
        char *s = n ? malloc(n) : NULL;
        if (s && clGetProgramInfo(p, CL_PROGRAM_SOURCE, n, s, NULL) == CL_SUCCESS) fprintf(stderr, "%s\n", s);
        free(s);
    }
    char log[4096] = "";
    clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    log[sizeof log - 1] = '\0';
    char *nl = log;
    for (int lines = 0; nl && lines < 3; lines++) nl = strchr(nl + 1, '\n');
    if (nl) *nl = '\0';
    kiln__kernel_error("OpenCL build failed (%s): %s", kiln__opencl_strerror(err), log[0] ? log : "no log");
    clReleaseProgram(p);
    return NULL;
}

static cl_program load_cached(kiln__opencl_device *d, uint64_t hash, size_t source_len) {
    char path[1100];
    if (!cache_path(hash, path, sizeof path, false)) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char magic[8];
    uint64_t h = 0, slen = 0, size = 0;
    unsigned char *bin = NULL;
    cl_program p = NULL;
    if (fread(magic, 1, 8, f) == 8 && memcmp(magic, MAGIC, 8) == 0 && fread(&h, 8, 1, f) == 1 && h == hash &&
        fread(&slen, 8, 1, f) == 1 && slen == source_len && fread(&size, 8, 1, f) == 1 && size > 0 &&
        size < ((uint64_t)256 << 20) && (bin = malloc(size)) && fread(bin, 1, size, f) == size && fgetc(f) == EOF) {
        const unsigned char *bins[1] = {bin};
        size_t sz = size;
        cl_int st = CL_SUCCESS, err = CL_SUCCESS;
        p = clCreateProgramWithBinary(d->context, 1, &d->id, &sz, bins, &st, &err);
        if (p && (err != CL_SUCCESS || st != CL_SUCCESS)) clReleaseProgram(p), p = NULL;
        if (p) {
            p = build(d, p);
            kiln__kernel_error("%s", ""); /* a refused binary is no error: built from source below */
        }
    }
    free(bin);
    fclose(f);
    return p;
}

/* A program made from source in a context of several devices has a binary slot per device,
 * built only for d's: its binary is the one at d's place in the program's device list. */
static void store_cached(kiln__opencl_device *d, cl_program p, uint64_t hash, size_t source_len) {
    char path[1100], tmp[1200];
    cl_uint n_dev = 0;
    if (!cache_path(hash, path, sizeof path, true)) return;
    if (clGetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof n_dev, &n_dev, NULL) != CL_SUCCESS || !n_dev ||
        n_dev > KILN_MAX_DEVICES)
        return;
    cl_device_id ids[KILN_MAX_DEVICES];
    size_t sizes[KILN_MAX_DEVICES] = {0};
    unsigned char *bins[KILN_MAX_DEVICES] = {NULL};
    cl_uint at = n_dev;
    if (clGetProgramInfo(p, CL_PROGRAM_DEVICES, n_dev * sizeof *ids, ids, NULL) == CL_SUCCESS)
        for (cl_uint i = 0; i < n_dev && at == n_dev; i++)
            if (ids[i] == d->id) at = i;
    if (at == n_dev || clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, n_dev * sizeof *sizes, sizes, NULL) != CL_SUCCESS ||
        !sizes[at])
        return;
    size_t size = sizes[at];
    unsigned char *bin = bins[at] = malloc(size); /* (NULL slots: no binary wanted there) */
    if (bin && clGetProgramInfo(p, CL_PROGRAM_BINARIES, n_dev * sizeof *bins, bins, NULL) == CL_SUCCESS) {
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        uint64_t h = hash, slen = source_len, sz = size;
        bool ok = f && fwrite(MAGIC, 1, 8, f) == 8 && fwrite(&h, 8, 1, f) == 1 && fwrite(&slen, 8, 1, f) == 1 &&
                  fwrite(&sz, 8, 1, f) == 1 && fwrite(bin, 1, size, f) == size;
        if (f && fclose(f) != 0) ok = false;
        if (ok) rename(tmp, path); /* atomic: a reader sees the old file or the whole new one */
        else unlink(tmp);
    }
    free(bin);
}

cl_program kiln__opencl_program_get(kiln__opencl_device *d, const char *source) {
    uint64_t hash = program_hash(d, source);
    pthread_mutex_lock(&d->prog_lock);
    for (kiln__opencl_program *e = d->programs; e; e = e->next)
        if (e->hash == hash && strcmp(e->source, source) == 0) {
            pthread_mutex_unlock(&d->prog_lock);
            return e->program;
        }
    /* built under the lock: two workers never compile one program twice */
    size_t len = strlen(source);
    cl_program p = load_cached(d, hash, len);
    if (!p) {
        cl_int err = CL_SUCCESS;
        p = clCreateProgramWithSource(d->context, 1, &source, &len, &err);
        if (err != CL_SUCCESS) {
            kiln__opencl_fail(err, "clCreateProgramWithSource");
            p = NULL;
        } else if ((p = build(d, p))) {
            store_cached(d, p, hash, len);
        }
    }
    /* the compiler may register exit handlers as it first runs a path: the exit hold after them */
    static atomic_int registrations;
    if (p && atomic_fetch_add(&registrations, 1) < 64) kiln__backend_exit_hold_register();
    kiln__opencl_program *e = p ? malloc(sizeof *e) : NULL;
    char *copy = e ? malloc(len + 1) : NULL;
    if (p && !copy) {
        free(e);
        clReleaseProgram(p);
        kiln__kernel_error("out of host memory caching a program");
        p = NULL;
    } else if (p) {
        memcpy(copy, source, len + 1);
        *e = (kiln__opencl_program){.source = copy, .hash = hash, .program = p, .next = d->programs};
        d->programs = e;
    }
    pthread_mutex_unlock(&d->prog_lock);
    return p;
}

/* cl_kernel objects per thread (a kernel's arguments are per object, so one object must not
 * be shared by threads launching at once), by program; dropped when the programs are. */
#define THREAD_KERNELS 64
static atomic_uint programs_generation;
static _Thread_local struct {
    unsigned generation;
    unsigned next;
    cl_program program[THREAD_KERNELS];
    const char *name[THREAD_KERNELS]; /* the kernel's name in its program (a user's op: its own) */
    cl_kernel kernel[THREAD_KERNELS];
} tk;

static void thread_kernels_drop(void) {
    for (int i = 0; i < THREAD_KERNELS; i++) {
        if (tk.kernel[i]) clReleaseKernel(tk.kernel[i]);
        tk.kernel[i] = NULL;
        tk.program[i] = NULL;
        tk.name[i] = NULL;
    }
}

/* A thread that ends releases its kernels (engine workers live as long as the process; user
 * threads launch kernels in KILN_SYNC=1 mode). */
static pthread_key_t tk_key;
static pthread_once_t tk_once = PTHREAD_ONCE_INIT;
static void tk_exit(void *unused) { thread_kernels_drop(); }
static void tk_init(void) { pthread_key_create(&tk_key, tk_exit); }

/* The thread's kernel `name` of p (created on first use), or NULL with *err set. name must
 * live as long as the process (kiln's "k", a registered op's copy). */
static cl_kernel thread_kernel(cl_program p, const char *name, cl_int *err) {
    if (!tk.next) { /* the thread's first kernel: arrange the release at its exit */
        pthread_once(&tk_once, tk_init);
        pthread_setspecific(tk_key, (void *)1);
    }
    unsigned gen = atomic_load_explicit(&programs_generation, memory_order_acquire);
    if (tk.generation != gen) {
        thread_kernels_drop(); /* the programs they came from were freed */
        tk.generation = gen;
    }
    for (int i = 0; i < THREAD_KERNELS; i++)
        if (tk.program[i] == p && tk.kernel[i] && strcmp(tk.name[i], name) == 0) return tk.kernel[i];
    cl_kernel k = clCreateKernel(p, name, err);
    if (*err != CL_SUCCESS) return NULL;
    int slot = (int)(tk.next++ % THREAD_KERNELS);
    if (tk.kernel[slot]) clReleaseKernel(tk.kernel[slot]);
    tk.program[slot] = p;
    tk.name[slot] = name;
    tk.kernel[slot] = k;
    return k;
}

void kiln__opencl_programs_free(kiln__opencl_device *d) {
    atomic_fetch_add_explicit(&programs_generation, 1, memory_order_release);
    thread_kernels_drop(); /* this thread's now; other threads' at their next launch */
    pthread_mutex_lock(&d->prog_lock);
    for (kiln__opencl_program *e = d->programs, *next; e; e = next) {
        next = e->next;
        clReleaseProgram(e->program);
        free(e->source);
        free(e);
    }
    d->programs = NULL;
    pthread_mutex_unlock(&d->prog_lock);
}

kiln_status kiln__opencl_run(kiln__opencl_device *d, const kiln__op *op, kiln__text *src, size_t global, const kiln__opencl_arg *args,
                         int n_args) {
    kiln_status st = KILN_ERR_OUT_OF_MEMORY;
    if (src->oom) kiln__kernel_error("out of host memory generating an OpenCL kernel");
    else st = kiln__opencl_launch(d, op, src->s, global, args, n_args);
    free(src->s);
    src->s = NULL;
    return st;
}

kiln_status kiln__opencl_launch(kiln__opencl_device *d, const kiln__op *op, const char *source, size_t global,
                            const kiln__opencl_arg *args, int n_args) {
    return kiln__opencl_launch_local(d, op, source, global, 0, args, n_args);
}

kiln_status kiln__opencl_launch_local(kiln__opencl_device *d, const kiln__op *op, const char *source, size_t global,
                                  size_t local, const kiln__opencl_arg *args, int n_args) {
    return kiln__opencl_launch_named(d, op, source, "k", global, local, args, n_args);
}

kiln_status kiln__opencl_launch_named(kiln__opencl_device *d, const kiln__op *op, const char *source, const char *name,
                                  size_t global, size_t local, const kiln__opencl_arg *args, int n_args) {
    cl_program p = kiln__opencl_program_get(d, source);
    if (!p) return KILN_ERR_KERNEL;
    if (global == 0) return KILN_OK;
    cl_int err = CL_SUCCESS;
    cl_kernel k = thread_kernel(p, name, &err);
    if (!k) return kiln__opencl_fail(err, "clCreateKernel");
    for (int i = 0; i < n_args && err == CL_SUCCESS; i++) err = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].ptr);
    cl_event ev = NULL;
    if (err == CL_SUCCESS) err = clEnqueueNDRangeKernel(kiln__opencl_queue(d, op), k, 1, NULL, &global, local ? &local : NULL, 0, NULL, &ev);
    if (err != CL_SUCCESS) return kiln__opencl_fail(err, "launching an OpenCL kernel");
    return kiln__opencl_done(d, ev, "an OpenCL kernel");
}

#endif
