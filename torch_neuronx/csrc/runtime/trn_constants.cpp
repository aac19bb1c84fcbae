// runtime/trn_constants.cpp - the libtrn enum values and constants the
// Python side uses, taken from the C headers so Python never retypes a C
// number:
//   torch_neuronx._C._trn_constants()  C name -> value
//                                      ({"TRN_GRAPH_MAX": 2, ...})
//   torch_neuronx._C._trn_dtype_ids()  trn_dtype_name -> trn_dtype
//                                      ({"float32": 11, ...})
// Read once at import by torch_neuronx/_trn_constants.py (for
// _compile/lower*.py, _logging.py, cli/stats_pages.py). (The trn_ew_op ids
// are compile/compiler.cpp's _ew_op_ids.)
#include <pybind11/pybind11.h>

#include "runtime/bindings.h"
#include "trn/compiler.h"
#include "trn/device.h"
#include "trn/dtype.h"
#include "trn/log.h"
#include "trn/metrics.h"

namespace py = pybind11;

namespace neuron {
namespace {

void register_constants(py::module_ &m) {
    m.def("_trn_constants", [] {
        py::dict d;
#define NEURON_ENUM(x) d[#x] = static_cast<int>(x)
        // trn/compiler.h
        NEURON_ENUM(TRN_GRAPH_SUM);
        NEURON_ENUM(TRN_GRAPH_PROD);
        NEURON_ENUM(TRN_GRAPH_MAX);
        NEURON_ENUM(TRN_GRAPH_MIN);
        NEURON_ENUM(TRN_INDEX_ERROR_BOUNDS);
        NEURON_ENUM(TRN_INDEX_ERROR_SELF);
        NEURON_ENUM(TRN_INDEX_ERROR_GATHER);
        NEURON_ENUM(TRN_INDEX_ERROR_COUNT);
        NEURON_ENUM(TRN_INDEX_ERROR_SOURCE);
        NEURON_ENUM(TRN_CONV_FORWARD);
        NEURON_ENUM(TRN_CONV_BACKWARD_DATA);
        NEURON_ENUM(TRN_CONV_BACKWARD_WEIGHTS);
        // trn/log.h
        NEURON_ENUM(TRN_LOG_ERROR);
        NEURON_ENUM(TRN_LOG_WARNING);
        NEURON_ENUM(TRN_LOG_INFO);
        NEURON_ENUM(TRN_LOG_DEBUG);
#undef NEURON_ENUM
#define NEURON_CONST(x) d[#x] = static_cast<unsigned long long>(x)
        // the stats page (trn/metrics.h, trn/device.h)
        NEURON_CONST(TRN_STATS_MAGIC);
        NEURON_CONST(TRN_STATS_VERSION);
        NEURON_CONST(TRN_STATS_COUNTERS);
        NEURON_CONST(TRN_MAX_DEVICES);
#undef NEURON_CONST
        return d;
    });
    m.def("_trn_dtype_ids", [] {
        py::dict d;
        for (int i = 0; i < TRN_DTYPE_COUNT; i++)
            d[py::str(trn_dtype_name(static_cast<trn_dtype>(i)))] = i;
        return d;
    });
}

BindingsRegistrar reg_constants(register_constants);

}  // namespace
}  // namespace neuron
