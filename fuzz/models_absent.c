/* models_absent.c: the fuzz harnesses read config files, not models. The registry
 * (dllm/arch.c) names the ops table of each model behind the policy
 * (dllm/policy_model.h), whose code -- the whole model and its kernels -- the harnesses
 * do not link, so they link this empty table in its place: the config readers never
 * call it, and a call through it would crash the harness (a finding), not pass. */
#include "dllm/policy_model.h"

const dllm_model_ops qwen35_model_ops = {0};
