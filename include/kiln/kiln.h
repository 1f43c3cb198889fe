// The one header a kiln user includes.
#pragma once
#include "kiln/attention.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/gpt.h"
#include "kiln/io.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/ops.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"
