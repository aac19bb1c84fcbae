// trn/trn.h - libtrn, the C core of OpenNeuron: a software NeuronCore runtime
// (devices, memory, streams, events) and its kernels. No PyTorch here.
//
// Example:
//   trn_stream *s; void *d; float h[4] = {1, 2, 3, 4}, back[4];
//   trn_mem_alloc(0, sizeof h, NULL, &d);
//   trn_stream_get_current(0, &s);
//   int64_t n = 4, one = 1;
//   trn_copy_desc c = {1, &n, d, &one, TRN_DTYPE_F32, h, &one, TRN_DTYPE_F32};
//   trn_copy_launch(s, &c);                 // host -> device, asynchronous
//   c.dst = back; c.src = d;
//   trn_copy_launch(s, &c);                 // device -> host
//   if (trn_stream_synchronize(s) != TRN_SUCCESS) puts(trn_last_error());
//   trn_mem_free(d);
#ifndef TRN_TRN_H
#define TRN_TRN_H
#include "trn/status.h"
#include "trn/dtype.h"
#include "trn/device.h"
#include "trn/stream.h"
#include "trn/memory.h"
#include "trn/copy.h"
#include "trn/elementwise.h"
#include "trn/parallel.h"
#include "trn/index.h"
#include "trn/blas.h"
#include "trn/weight_cache.h"
#include "trn/conv.h"
#include "trn/reduce.h"
#include "trn/fill.h"
#include "trn/sort.h"
#include "trn/norm.h"
#include "trn/loss.h"
#include "trn/log.h"
#include "trn/metrics.h"
#include "trn/trace.h"
#endif
