/* runner.c: the one main of every suite binary (harness.h). On its own in this file so
 * that a suite's other uses of the harness never bring in a second main. */
#include "tests/harness/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *slash = strrchr(argv[0], '/');
    tu_runner_name = slash ? slash + 1 : argv[0];
    /* libtool's wrapper runs the binary as lt-NAME */
    if (strncmp(tu_runner_name, "lt-", 3) == 0)
        tu_runner_name += 3;
    tu_ctx ctx = {.argc = argc, .argv = argv};
    Suite *s = tu_suite(&ctx);
    if (!s) {
        tu_cleanup();
        return ctx.status;
    }
    SRunner *sr = srunner_create(s);
    if (ctx.nofork)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int status = srunner_ntests_failed(sr) ? EXIT_FAILURE : EXIT_SUCCESS;
    srunner_free(sr);
    if (ctx.finish)
        status = ctx.finish(status);
    if (status == EXIT_SUCCESS && ctx.partial[0]) {
        printf("%s: SKIP: %s\n", tu_runner_name, ctx.partial);
        status = 77;
    }
    tu_cleanup();
    return status;
}
