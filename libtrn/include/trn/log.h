// trn/log.h - leveled logging for every layer of OpenNeuron (libtrn, the C++
// adapters and, through bindings, Python), so one switch shows what the
// device does: fallbacks, allocator events, compiles, collectives.
//
// TORCH_NEURONX_LOG_LEVEL (read once): ERROR, WARNING, INFO or DEBUG (any
// case), or TorchNeuron's numbers 0..3 (0 = ERROR, 3 = DEBUG). Default
// WARNING. TORCH_NEURONX_LOG_FILE appends to a file instead of stderr.
// TORCH_NEURONX_ENABLE_STACK_TRACE=1 adds the native call stack to every
// ERROR and WARNING record (the Python layer adds the Python stack).
//
// A record is one line: "[neuron W 13:02:11.532 pid 812] alloc: message".
// Use trn_log_enabled() before building an expensive message.
#ifndef TRN_LOG_H
#define TRN_LOG_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_log_level {
    TRN_LOG_ERROR = 0,
    TRN_LOG_WARNING = 1,
    TRN_LOG_INFO = 2,
    TRN_LOG_DEBUG = 3,
} trn_log_level;

// Whether records of `level` are written.
bool trn_log_enabled(trn_log_level level);
// Writes one record if `level` is enabled. `component` names the area
// ("alloc", "fallback", "compile", "collective", ...); the message needs no
// trailing newline. Thread-safe; records are never interleaved.
void trn_log(trn_log_level level, const char *component, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
// Writes a preformatted message (used by the bindings).
void trn_log_message(trn_log_level level, const char *component, const char *message);
trn_log_level trn_log_get_level(void);
// Overrides the environment for the rest of the process.
void trn_log_set_level(trn_log_level level);
// Parses "DEBUG", "debug", "3", ...; false if the text is none of them.
bool trn_log_parse_level(const char *text, trn_log_level *level);
// Whether TORCH_NEURONX_ENABLE_STACK_TRACE is on.
bool trn_log_stack_trace_enabled(void);

#ifdef __cplusplus
}
#endif
#endif
