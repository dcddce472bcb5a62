/* placeholder until its module lands; replaced by the real benchmark */
#include "src/commands.h"
#include <stdio.h>
int bench_mismatch(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "dllm-rl bench mismatch: not built yet\n");
    return 1;
}
