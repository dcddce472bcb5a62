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
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* the second signal finds the default action back: it ends the process */
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int run_stop_requested(void)
{
    return requested;
}
