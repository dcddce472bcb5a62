/* dllm-rl config: every configuration key with its default, range or choices
 * and meaning, from the key table the parser uses (src/config/yaml_config.c). */
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"
#include "src/config/yaml_config.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dllm-rl config [--defaults] [KEY | SECTION]\n"
    "\n"
    "Lists every configuration key (or one KEY, or the keys of a SECTION such as\n"
    "grpo or correction.ais): its default, its range or choices, and what it means.\n"
    "--defaults prints `key: default` lines instead, a YAML file the config reader\n"
    "accepts (a starting point for an experiment).\n";

/* Does key `path` belong to the selection (NULL: everything)? */
static bool selected(const char *path, const char *sel)
{
    if (!sel)
        return true;
    size_t n = strlen(sel);
    return !strncmp(path, sel, n) && (path[n] == '\0' || path[n] == '.');
}

int cmd_config(int argc, char **argv)
{
    static const struct option opts[] = {{"defaults", no_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool defaults = false;
    dllm_err err = {0};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case 'd': defaults = true; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default:
            dllm_err_set(&err, DLLM_EXIT_INPUT, "bad option (see --help)");
            return cli_fail("config", &err);
        }
    }
    const char *sel = optind < argc ? argv[optind++] : NULL;
    if (optind < argc) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "expected at most one KEY or SECTION (see --help)");
        return cli_fail("config", &err);
    }
    int shown = 0;
    for (size_t i = 0; i < dllm_cfg_nkeys(); i++) {
        dllm_cfg_key_doc k;
        dllm_cfg_key_doc_get(i, &k);
        if (!selected(k.path, sel))
            continue;
        shown++;
        if (defaults) {
            printf("%s: %s\n", k.path, k.def[0] ? k.def : "\"\"");
            continue;
        }
        printf("%s\n  default: %s\n  %s: %s\n  %s\n", k.path, k.def[0] ? k.def : "(empty)",
               k.range[0] ? (strchr(k.range, '|') ? "choices" : "range") : "type",
               k.range[0] ? k.range : k.type, k.desc);
    }
    if (!shown) {
        dllm_err_set(&err, DLLM_EXIT_INPUT,
                     "'%s' is neither a key nor a section (`dllm-rl config` lists them all)", sel);
        return cli_fail("config", &err);
    }
    return 0;
}
