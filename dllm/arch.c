/* arch.c: the descriptor lookups (arch.h). */
#include "dllm/arch.h"

#include <stdio.h>
#include <string.h>

const dllm_arch_desc *dllm_arch_get(dllm_arch id)
{
    return id == DLLM_ARCH_QWEN3 ? &dllm_arch_qwen3 : &dllm_arch_llada;
}

int dllm_arch_lora_bit(const dllm_arch_desc *a, const char *name)
{
    for (int j = 0; name && j < DLLM_NLIN; j++)
        if (!strcmp(name, a->lora_name[j]) || (a->lora_alias && !strcmp(name, a->lora_alias[j])))
            return 1 << j;
    return 0;
}

const char *dllm_arch_lora_list(const dllm_arch_desc *a, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int j = 0; j < DLLM_NLIN && n < cap; j++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", a->lora_name[j],
                              j == DLLM_NLIN - 2 ? " or " : j < DLLM_NLIN - 1 ? ", " : "");
    return buf;
}

bool dllm_arch_has(const dllm_arch_desc *a, int slot)
{
    for (int i = 0; i < a->n_order; i++)
        if (a->order[i] == slot)
            return true;
    return false;
}
