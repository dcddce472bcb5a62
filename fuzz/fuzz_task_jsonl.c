/* fuzz_task_jsonl.c: the dataset loaders (JSONL for every task, CSV for sudoku)
 * from memory. The first byte picks the task. Checks: no crash, no leak (ASan),
 * and either items with a reference, or an error naming "fuzz.jsonl:". */
#include "tasks/registry.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t n;
    const dllm_task *const *all = dllm_task_all(&n);
    const dllm_task *t = all[data[0] % n];
    dllm_task_items items;
    dllm_err err = {0};
    int rc = dllm_task_load_buffer(t, "fuzz.jsonl", (const char *)data + 1, size - 1, &items, &err);
    if (rc) {
        if (strncmp(err.msg, "fuzz.jsonl:", 11) || items.n)
            abort();
        return 0;
    }
    for (size_t i = 0; i < items.n; i++) {
        if (!items.items[i].answer || !items.items[i].question)
            abort();
        char *p = t->format(&items.items[i]);
        (void)t->reward(&items.items[i], p, strlen(p));
        free(p);
    }
    dllm_task_items_free(&items);
    return 0;
}
