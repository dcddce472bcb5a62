/* run_stop.c: SIGINT/SIGTERM as a request to stop at the next step (src/run/run_stop.h). */
#include "src/run/run_stop.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t requested;

static void on_signal(int sig)
{
    if (!requested) {
        static const char msg[] = "\ndllm-rl: stopping at the next step boundary, with a "
                                  "checkpoint (signal again to stop now, losing the step)\n";
        ssize_t k = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)k;
    }
    requested = sig;
}

void run_stop_catch(void)
{
    /* The handler runs on a stack of its own: JIT-compiled GEMM kernels (oneDNN's on
     * AVX-512) may keep data below their stack pointer beyond the ABI's red zone, which a
     * handler frame pushed on the interrupted stack would overwrite (seen: heap corruption
     * in the GEMM after a SIGINT). Set up once, for the thread that calls this. */
    static char alt[64 * 1024];
    static int have_alt;
    if (!have_alt) {
        stack_t ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_sp = alt;
        ss.ss_size = sizeof alt;
        have_alt = sigaltstack(&ss, NULL) == 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* the second signal finds the default action back: it ends the process */
    sa.sa_flags = SA_RESTART | SA_RESETHAND | (have_alt ? SA_ONSTACK : 0);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int run_stop_requested(void)
{
    return requested;
}
