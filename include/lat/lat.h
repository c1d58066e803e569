// Umbrella header: everything a user of lat needs.
#pragma once
#include "lat/cuda.h"
#include "lat/dtype.h"
#include "lat/error.h"
#include "lat/grad_check.h"
#include "lat/linear_attention.h"
#include "lat/ops.h"
#include "lat/precision.h"
#include "lat/tape.h"
#include "lat/tensor.h"
#include "lat/version.h"
