/* placeholder until its module lands; replaced by the real command */
#include "src/commands.h"
#include <stdio.h>
int cmd_inspect(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "dllm-rl: not built yet\n");
    return 1;
}
