// The one header a kiln user includes: every public header but stable/ (the
// extension ABI, compiled against on its own).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include "kiln/attention.h"
#include "kiln/compile.h"
#include "kiln/paged_attention.h"
#include "kiln/autograd.h"
#include "kiln/autograd_function.h"
#include "kiln/call_op.h"
#include "kiln/data.h"
#include "kiln/data_parallel.h"
#include "kiln/distributed.h"
#include "kiln/dispatch.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/extension.h"
#include "kiln/gpt.h"
#include "kiln/io.h"
#include "kiln/linalg.h"
#include "kiln/lr_scheduler.h"
#include "kiln/moe.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/ops.h"
#include "kiln/profiler.h"
#include "kiln/quantization.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"

KILN_API_END
