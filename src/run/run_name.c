/* run_name.c: what a run directory may be called (run_dir.h). On its own, without the
 * rest of run_dir.c's file-system work, so the config's validation can use it anywhere
 * (the YAML fuzz harness links it alone). */
#include "src/run/run_dir.h"

#include <ctype.h>
#include <string.h>

bool run_dir_plain_name(const char *s)
{
    if (!*s || !strcmp(s, ".") || !strcmp(s, ".."))
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._+-=", *s))
            return false;
    return true;
}
