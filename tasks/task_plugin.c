/* task_plugin.c: see task_plugin.h. */
#include "tasks/task_plugin.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dllm_plugin {
    void *dl;
    const dllm_task_plugin *t;
    void *state;
    char name[160]; /* "NAME (PATH)" for messages */
};

/* The plugin's message buffer: cleared before a call, terminated after it. */
#define PLUGIN_MSG 512

int dllm_plugin_open(dllm_plugin **out, const char *path, dllm_err *err)
{
    *out = NULL;
    /* a bare file name is the file here, not a search of the library path */
    char local[4200];
    snprintf(local, sizeof local, "%s%s", strchr(path, '/') ? "" : "./", path);
    dlerror();
    void *dl = dlopen(local, RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin: cannot load '%s': %s", path,
                            dlerror());
    dllm_task_plugin_entry_fn entry;
    void *sym = dlsym(dl, DLLM_TASK_PLUGIN_ENTRY);
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer, as POSIX allows */
    const dllm_task_plugin *t = entry ? entry() : NULL;
    int rc = 0;
    if (!entry)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin: '%s' exports no %s() (see "
                          "dllm_task_plugin.h)", path, DLLM_TASK_PLUGIN_ENTRY);
    else if (!t)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin: '%s': %s() returned NULL", path,
                          DLLM_TASK_PLUGIN_ENTRY);
    else if (t->abi_version != DLLM_TASK_PLUGIN_ABI_VERSION)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin: '%s' was built for plugin ABI "
                          "version %u, this dllm-rl reads version %d: rebuild it against this "
                          "dllm-rl's dllm_task_plugin.h", path, (unsigned)t->abi_version,
                          DLLM_TASK_PLUGIN_ABI_VERSION);
    else if (t->size < sizeof(dllm_task_plugin))
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin: '%s': its table is %u bytes, "
                          "version %d's is %zu: rebuild it against dllm_task_plugin.h", path,
                          (unsigned)t->size, DLLM_TASK_PLUGIN_ABI_VERSION, sizeof(dllm_task_plugin));
    else if (!t->reward)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin: '%s' has no reward function", path);
    if (rc) {
        dlclose(dl);
        return rc;
    }
    dllm_plugin *p = dllm_calloc(1, sizeof *p);
    p->dl = dl;
    p->t = t;
    snprintf(p->name, sizeof p->name, "%.40s (%.110s)", t->name ? t->name : "?", path);
    if (t->init) {
        char msg[PLUGIN_MSG] = "";
        int r = t->init(&p->state, msg, sizeof msg);
        msg[sizeof msg - 1] = '\0';
        if (r) {
            dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin %s: init failed: %s", p->name,
                         msg[0] ? msg : "(no message)");
            dlclose(dl);
            free(p);
            return err->code;
        }
    }
    *out = p;
    return 0;
}

const char *dllm_plugin_name(const dllm_plugin *p)
{
    return p->name;
}

bool dllm_plugin_has_format(const dllm_plugin *p)
{
    return p->t->format != NULL;
}

bool dllm_plugin_has_generate(const dllm_plugin *p)
{
    return p->t->generate != NULL;
}

int dllm_plugin_reward(dllm_plugin *p, const dllm_task_plugin_sample *s, double *reward,
                       int *correct, int code, dllm_err *err)
{
    char msg[PLUGIN_MSG] = "";
    *correct = -1;
    *reward = NAN;
    int r = p->t->reward(p->state, s, reward, correct, msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    if (r)
        return dllm_err_set(err, code, "task.plugin %s: reward failed: %s", p->name,
                            msg[0] ? msg : "(no message)");
    if (!isfinite(*reward))
        return dllm_err_set(err, code, "task.plugin %s: reward %g is not finite", p->name, *reward);
    if (*correct != -1 && *correct != 0 && *correct != 1)
        return dllm_err_set(err, code, "task.plugin %s: correct = %d (expected 0, 1 or -1)",
                            p->name, *correct);
    return 0;
}

char *dllm_plugin_format(dllm_plugin *p, const char *prompt, const char *reference, dllm_err *err)
{
    const char *s = p->t->format(p->state, prompt, reference);
    if (!s) {
        dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin %s: format returned NULL", p->name);
        return NULL;
    }
    return dllm_strdup(s);
}

int dllm_plugin_generate(dllm_plugin *p, uint64_t seed, uint64_t index, char **prompt,
                         char **reference, dllm_err *err)
{
    const char *q = NULL, *a = NULL;
    char msg[PLUGIN_MSG] = "";
    int r = p->t->generate(p->state, seed, index, &q, &a, msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    if (r)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin %s: generate failed at item %llu: "
                            "%s", p->name, (unsigned long long)index, msg[0] ? msg : "(no message)");
    if (!q || !a)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task.plugin %s: generate gave no %s for item "
                            "%llu", p->name, q ? "reference" : "prompt", (unsigned long long)index);
    *prompt = dllm_strdup(q);
    *reference = dllm_strdup(a);
    return 0;
}

void dllm_plugin_close(dllm_plugin *p)
{
    if (!p)
        return;
    if (p->t->fini)
        p->t->fini(p->state);
    dlclose(p->dl);
    free(p);
}
