/* fiber.cc: kernel execution of the CUDA emulation -- the threads of a block as fibers,
 * barriers, warp collectives and the thread schedule.
 *
 * A fiber is a small stack (DLLM_EMU_STACK_KB, default 64 KiB, with a guard page) that
 * runs one kernel thread after another. On x86-64 a switch pushes the callee-saved
 * registers and swaps stack pointers (ctx_switch); elsewhere, under a shadow stack or
 * with DLLM_EMU_SWITCH=portable, a fiber is entered the first time with setcontext and
 * afterwards switched with _setjmp/_longjmp, which do not save the signal mask (no
 * system call per switch) but cost several times more: a reduction's shuffles switch at
 * every step. A thread runs until it reaches __syncthreads, a warp
 * collective or its end; then the scheduler runs the next runnable thread in the order
 * chosen by DLLM_EMU_SCHEDULE:
 *   in-order (default)  threads 0, 1, ... and blocks in grid order
 *   reverse             the highest thread (and block) first
 *   random[:SEED]       a fresh permutation of threads every round, blocks shuffled
 * so a missing barrier or a race between threads shows as a wrong result under one of
 * them. Errors (a barrier not reached by every thread, lanes of one mask in different
 * collectives, a lane of the mask that exited, __trap) print the kernel's name, block and
 * thread, abandon the launch and become the launch's error (cudaErrorLaunchFailure). */
#undef _FORTIFY_SOURCE /* its longjmp check rejects jumps between fiber stacks */
#include "kernels/cuda_emu/emu_internal.h"

#include <csetjmp>
#include <cstdint>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

namespace dllm_emu {

uint3 g_thread_idx, g_block_idx;
dim3 g_block_dim, g_grid_dim;

namespace {

enum fstate { F_RUNNABLE, F_BARRIER, F_WARP, F_DONE, F_FAILED };

/* A saved execution context: a fiber's or the scheduler's. */
struct fctx {
    void *sp; /* the fast switch's: its stack pointer, the callee-saved registers and the
                 resume address on top */
    jmp_buf jb; /* the portable switch's */
    ucontext_t uc;
    bool started; /* has a live context (else uc enters it) */
};

struct fiber {
    fctx ctx;
    char *stack;
    bool started; /* has a live context that loops over kernel threads */
    fstate st;
    uint3 tid;
    unsigned linear;
    const char *bar_file;
    int bar_line;
    void *xdst; /* where a completed warp exchange leaves the values this lane asked for */
    int xsrc;   /* the lane whose value it asked for, or -1: all 32 */
};

struct warp_state {
    unsigned mask, arrived;
    size_t size;
    const char *what;
    /* lane l's value at l * size: the 32 values every lane receives, in one copy each
       (a reduction's shuffles are most of what the emulated kernels do) */
    unsigned char vals[32 * WARP_SLOT_BYTES];
};

enum { MAX_THREADS = 1024 };

fiber g_fib[MAX_THREADS];
warp_state g_warp[MAX_THREADS / 32];
fctx g_sched; /* the scheduler's: live from the first switch away from it */
fiber *g_cur;
unsigned g_nthreads;
thread_body g_body;
void *g_body_ctx;
const char *g_kernel;
char g_fail[600];
bool g_block_failed;
std::vector<unsigned char> g_dyn_smem;
size_t g_stack_bytes;
uint64_t g_rng = 0x9e3779b97f4a7c15ULL;

enum sched_kind { S_INORDER, S_REVERSE, S_RANDOM };
sched_kind g_sched_kind = S_INORDER;
char g_sched_name[64] = "in-order";

uint64_t next_rand(void)
{
    /* xorshift64*: enough to permute threads */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1DULL;
}

void choose_switch(void);

void read_schedule(void)
{
    static bool done = false;
    if (done)
        return;
    done = true;
    choose_switch();
    const char *s = getenv("DLLM_EMU_SCHEDULE");
    if (!s || !*s || !strcmp(s, "in-order") || !strcmp(s, "inorder")) {
        g_sched_kind = S_INORDER;
    } else if (!strcmp(s, "reverse")) {
        g_sched_kind = S_REVERSE;
        snprintf(g_sched_name, sizeof g_sched_name, "reverse");
    } else if (!strncmp(s, "random", 6) && (s[6] == '\0' || s[6] == ':')) {
        unsigned long long seed = s[6] ? strtoull(s + 7, NULL, 10) : 1;
        g_sched_kind = S_RANDOM;
        g_rng = 0x9e3779b97f4a7c15ULL ^ (seed * 0xbf58476d1ce4e5b9ULL);
        if (!g_rng)
            g_rng = 1;
        snprintf(g_sched_name, sizeof g_sched_name, "random:%llu", seed);
    } else {
        fprintf(stderr, "dllm-rl: DLLM_EMU_SCHEDULE=%s: expected in-order, reverse or "
                        "random[:SEED]\n", s);
        exit(2);
    }
    const char *kb = getenv("DLLM_EMU_STACK_KB");
    long k = kb ? atol(kb) : 64;
    if (k < 16)
        k = 16;
    g_stack_bytes = (size_t)k * 1024;
}

/* A permutation of [0, n) in the schedule's order. */
void order(std::vector<unsigned> &o, unsigned n)
{
    o.resize(n);
    for (unsigned i = 0; i < n; i++)
        o[i] = g_sched_kind == S_REVERSE ? n - 1 - i : i;
    if (g_sched_kind == S_RANDOM)
        for (unsigned i = n; i > 1; i--) {
            unsigned j = (unsigned)(next_rand() % i);
            unsigned t = o[i - 1];
            o[i - 1] = o[j];
            o[j] = t;
        }
}

void fiber_main(void);

/* The fast switch (x86-64, where no shadow stack checks returns: it returns into another
 * stack), else the portable one; DLLM_EMU_SWITCH=portable chooses the portable one. */
bool g_fast_switch;

#if defined(__x86_64__)
} // namespace
} // namespace dllm_emu
/* Saves the callee-saved registers on this stack, stores its pointer in *from, loads to
 * and returns into what was saved there (the System V ABI's callee-saved state; the
 * floating-point control words are never changed by the emulated code). */
extern "C" void dllm_emu_ctx_switch(void **from, void *to);
__asm__(".text\n"
        ".globl dllm_emu_ctx_switch\n"
        ".hidden dllm_emu_ctx_switch\n"
        ".type dllm_emu_ctx_switch, @function\n"
        "dllm_emu_ctx_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size dllm_emu_ctx_switch, .-dllm_emu_ctx_switch\n");
namespace dllm_emu {
namespace {

[[noreturn]] void fiber_entry(void)
{
    fiber_main();
    abort();
}

/* rdsspq is a no-op (the register keeps 0) unless a shadow stack is active. */
bool shadow_stack_active(void)
{
    unsigned long long ssp = 0;
    __asm__ volatile("rdsspq %0" : "+r"(ssp));
    return ssp != 0;
}
#else
bool shadow_stack_active(void) { return true; }
#endif

void choose_switch(void)
{
    const char *e = getenv("DLLM_EMU_SWITCH");
    g_fast_switch = !shadow_stack_active() && !(e && !strcmp(e, "portable"));
}

/* A fresh context on [lo, hi) that enters fiber_main. */
void ctx_init(fctx *c, char *lo, char *hi)
{
#if defined(__x86_64__)
    if (g_fast_switch) {
        void **sp = (void **)((uintptr_t)hi & ~(uintptr_t)15);
        *--sp = NULL;                           /* fiber_entry's return address: none */
        *--sp = (void *)(uintptr_t)fiber_entry; /* where the first switch returns to */
        for (int i = 0; i < 6; i++)
            *--sp = NULL; /* the six callee-saved registers popped on entry */
        c->sp = sp;
        return;
    }
#endif
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = lo;
    c->uc.uc_stack.ss_size = (size_t)(hi - lo);
    c->uc.uc_link = NULL;
    makecontext(&c->uc, fiber_main, 0);
    c->started = false;
}

void ctx_switch(fctx *from, fctx *to)
{
#if defined(__x86_64__)
    if (g_fast_switch) {
        dllm_emu_ctx_switch(&from->sp, to->sp);
        return;
    }
#endif
    from->started = true;
    if (!_setjmp(from->jb)) {
        if (to->started) {
            _longjmp(to->jb, 1);
        } else {
            to->started = true;
            setcontext(&to->uc);
        }
    }
}

void fiber_main(void)
{
    for (;;) {
        fiber *f = g_cur;
        g_body(g_body_ctx);
        f->st = F_DONE;
        ctx_switch(&f->ctx, &g_sched);
        /* resumed for the next kernel thread: g_cur is this fiber again */
    }
}

void fiber_prepare(fiber *f)
{
    if (!f->stack) {
        long page = sysconf(_SC_PAGESIZE);
        void *m = mmap(NULL, g_stack_bytes + (size_t)page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            perror("dllm-rl: CUDA emulation: fiber stack");
            exit(1);
        }
        mprotect(m, (size_t)page, PROT_NONE); /* overflow faults instead of corrupting */
        f->stack = (char *)m;
    }
    long page = sysconf(_SC_PAGESIZE);
    ctx_init(&f->ctx, f->stack + page, f->stack + page + g_stack_bytes);
}

/* Runs f until it yields or finishes. */
void switch_to(fiber *f)
{
    g_cur = f;
    g_thread_idx = f->tid;
    f->started = true;
    ctx_switch(&g_sched, &f->ctx);
}

void yield_to_scheduler(void)
{
    ctx_switch(&g_cur->ctx, &g_sched);
}

void block_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void block_fail(const char *fmt, ...)
{
    if (g_block_failed)
        return;
    g_block_failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(g_fail, sizeof g_fail, "kernel %s, block (%u,%u,%u): %s", g_kernel,
             g_block_idx.x, g_block_idx.y, g_block_idx.z, msg);
}

/* Called on a fiber: record the error and leave the thread for good. */
void thread_fail(void)
{
    g_cur->st = F_FAILED;
    yield_to_scheduler();
    abort(); /* never resumed */
}

/* No thread can run: release a barrier or report why the block is stuck. Returns false
 * when the block failed. */
bool resolve(void)
{
    unsigned n_done = 0, n_bar = 0, n_warp = 0;
    fiber *bar0 = NULL, *warp0 = NULL;
    for (unsigned i = 0; i < g_nthreads; i++) {
        fiber *f = &g_fib[i];
        if (f->st == F_DONE)
            n_done++;
        else if (f->st == F_BARRIER) {
            n_bar++;
            if (!bar0)
                bar0 = f;
        } else if (f->st == F_WARP) {
            n_warp++;
            if (!warp0)
                warp0 = f;
        }
    }
    if (n_warp) {
        unsigned w = warp0->linear / 32;
        warp_state &W = g_warp[w];
        unsigned missing = W.mask & ~W.arrived;
        int l = __builtin_ctz(missing);
        fiber *m = &g_fib[w * 32 + (unsigned)l];
        const char *where = (w * 32 + (unsigned)l) >= g_nthreads ? "does not exist"
                            : m->st == F_DONE    ? "has exited"
                            : m->st == F_BARRIER ? "waits at __syncthreads"
                                                 : "waits in another collective";
        block_fail("%s in warp %u with mask 0x%08x: lane %d %s (arrived 0x%08x)", W.what, w,
                   W.mask, l, where, W.arrived);
        return false;
    }
    if (n_bar) {
        if (n_done) {
            block_fail("__syncthreads at %s:%d reached by %u threads while %u have exited "
                       "(a barrier in divergent code)", bar0->bar_file, bar0->bar_line, n_bar,
                       n_done);
            return false;
        }
        for (unsigned i = 0; i < g_nthreads; i++) {
            fiber *f = &g_fib[i];
            if (f->bar_line != bar0->bar_line || strcmp(f->bar_file, bar0->bar_file)) {
                block_fail("threads wait at different barriers: thread %u at %s:%d, thread "
                           "%u at %s:%d", bar0->linear, bar0->bar_file, bar0->bar_line,
                           f->linear, f->bar_file, f->bar_line);
                return false;
            }
        }
        for (unsigned i = 0; i < g_nthreads; i++)
            g_fib[i].st = F_RUNNABLE;
    }
    return true;
}

bool run_block(void)
{
    static std::vector<unsigned> ord;
    g_block_failed = false;
    for (unsigned i = 0; i < g_nthreads; i++) {
        fiber *f = &g_fib[i];
        if (!f->started && !f->stack)
            fiber_prepare(f);
        f->st = F_RUNNABLE;
        f->linear = i;
        f->tid.x = i % g_block_dim.x;
        f->tid.y = (i / g_block_dim.x) % g_block_dim.y;
        f->tid.z = i / (g_block_dim.x * g_block_dim.y);
    }
    for (unsigned w = 0; w < (g_nthreads + 31) / 32; w++)
        g_warp[w].arrived = 0;
    unsigned done = 0;
    while (done < g_nthreads && !g_block_failed) {
        bool ran = false;
        order(ord, g_nthreads);
        for (unsigned k = 0; k < g_nthreads && !g_block_failed; k++) {
            fiber *f = &g_fib[ord[k]];
            if (f->st != F_RUNNABLE)
                continue;
            switch_to(f);
            ran = true;
            if (f->st == F_DONE)
                done++;
        }
        if (!ran && done < g_nthreads && !resolve())
            break;
    }
    if (g_block_failed) {
        /* abandoned stacks: the next use of these fibers starts afresh */
        for (unsigned i = 0; i < g_nthreads; i++)
            if (g_fib[i].st != F_DONE) {
                g_fib[i].started = false;
                fiber_prepare(&g_fib[i]);
            }
        return false;
    }
    return true;
}

} // namespace

void syncthreads(const char *file, int line)
{
    fiber *f = g_cur;
    f->st = F_BARRIER;
    f->bar_file = file;
    f->bar_line = line;
    yield_to_scheduler();
}

unsigned lane_id(void) { return g_cur->linear & 31u; }

void warp_exchange(unsigned mask, const void *val, size_t size, void *out, int src,
                   const char *what)
{
    fiber *f = g_cur;
    unsigned lane = f->linear & 31u, w = f->linear / 32;
    warp_state &W = g_warp[w];
    if (size > WARP_SLOT_BYTES) {
        block_fail("%s: %zu bytes per lane, the exchange holds %d", what, size, WARP_SLOT_BYTES);
        thread_fail();
    }
    if (!((mask >> lane) & 1u)) {
        block_fail("%s: thread %u (lane %u) calls with mask 0x%08x, which leaves it out", what,
                   f->linear, lane, mask);
        thread_fail();
    }
    if (W.arrived == 0) {
        W.mask = mask;
        W.size = size;
        W.what = what;
    } else if (W.mask != mask || W.size != size || W.what != what) {
        block_fail("warp %u: lane %u calls %s (mask 0x%08x) while lanes 0x%08x wait in %s "
                   "(mask 0x%08x)", w, lane, what, mask, W.arrived, W.what, W.mask);
        thread_fail();
    }
    memcpy(W.vals + lane * size, val, size);
    W.arrived |= 1u << lane;
    f->xdst = out;
    f->xsrc = src;
    if (W.arrived != mask) {
        f->st = F_WARP;
        yield_to_scheduler();
        return; /* the last lane to arrive filled *all */
    }
    for (unsigned l = 0; l < 32; l++) {
        if (!((mask >> l) & 1u))
            continue;
        fiber *p = &g_fib[w * 32 + l];
        if (p->xsrc >= 0)
            memcpy(p->xdst, W.vals + (unsigned)p->xsrc * size, size);
        else
            memcpy(p->xdst, W.vals, 32 * size);
        if (p != f)
            p->st = F_RUNNABLE;
    }
    W.arrived = 0;
}

void *dynamic_smem(void) { return g_dyn_smem.empty() ? NULL : g_dyn_smem.data(); }

void warp_matrix_fail(const char *what, const char *why)
{
    block_fail("%s in thread %u: %s", what, g_cur->linear, why);
    thread_fail();
}

void device_trap(const char *file, int line)
{
    block_fail("__trap() at %s:%d in thread %u", file, line, g_cur->linear);
    thread_fail();
}

const char *schedule_name(void)
{
    read_schedule();
    return g_sched_name;
}

/* Runs every block of a checked launch; false (with msg) when a block failed. */
bool execute_grid(const char *name, dim3 grid, dim3 block, size_t smem, thread_body body,
                  void *ctx, char *msg, size_t msg_len)
{
    read_schedule();
    g_kernel = name;
    g_body = body;
    g_body_ctx = ctx;
    g_block_dim = block;
    g_grid_dim = grid;
    g_nthreads = block.x * block.y * block.z;
    g_dyn_smem.assign(smem, 0xFF); /* uninitialised shared memory reads as NaN */
    unsigned long long nb = (unsigned long long)grid.x * grid.y * grid.z;
    std::vector<unsigned long long> bo;
    if (g_sched_kind != S_INORDER) {
        bo.resize(nb);
        for (unsigned long long i = 0; i < nb; i++)
            bo[i] = g_sched_kind == S_REVERSE ? nb - 1 - i : i;
        if (g_sched_kind == S_RANDOM)
            for (unsigned long long i = nb; i > 1; i--) {
                unsigned long long j = next_rand() % i, t = bo[i - 1];
                bo[i - 1] = bo[j];
                bo[j] = t;
            }
    }
    for (unsigned long long k = 0; k < nb; k++) {
        unsigned long long b = bo.empty() ? k : bo[k];
        g_block_idx.x = (unsigned)(b % grid.x);
        g_block_idx.y = (unsigned)((b / grid.x) % grid.y);
        g_block_idx.z = (unsigned)(b / ((unsigned long long)grid.x * grid.y));
        if (!run_block()) {
            snprintf(msg, msg_len, "%s", g_fail);
            return false;
        }
    }
    return true;
}

} // namespace dllm_emu
