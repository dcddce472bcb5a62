/* run_stop.h: Ctrl-C (SIGINT) and SIGTERM ask a training run to stop at its next
 * step boundary, where it writes a checkpoint and says how to resume, instead of
 * dying in the middle of a write. A second signal ends the process at once. */
#ifndef DLLM_RUN_STOP_H
#define DLLM_RUN_STOP_H

/* Installs the handlers (stderr says, once, that the run stops at the next step). */
void run_stop_catch(void);
/* The signal received since run_stop_catch, or 0. */
int run_stop_requested(void);

#endif
