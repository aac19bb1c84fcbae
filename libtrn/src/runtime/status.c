// status.c - owns the status-code tables and the per-thread last-error
// message. Messages are thread-local because the C++ layer reads them right
// after a failing call on the same thread, and stream workers set their own
// without disturbing the caller's.
#include <stdarg.h>
#include <stdio.h>

#include "../internal.h"

static _Thread_local char tl_error[TRN__ERROR_MAX];

const char *trn_status_name(trn_status status) {
    switch (status) {
#define TRN__STATUS_NAME(name, value, text)                                                        \
    case name: return #name;
        TRN_STATUS_LIST(TRN__STATUS_NAME)
#undef TRN__STATUS_NAME
    }
    return "TRN_UNKNOWN_STATUS";
}

const char *trn_status_string(trn_status status) {
    switch (status) {
#define TRN__STATUS_TEXT(name, value, text)                                                        \
    case name: return text;
        TRN_STATUS_LIST(TRN__STATUS_TEXT)
#undef TRN__STATUS_TEXT
    }
    return "unknown status";
}

const char *trn_last_error(void) { return tl_error; }

void trn_clear_error(void) { tl_error[0] = '\0'; }

trn_status trn__set_error(trn_status status, const char *fmt, ...) {
    // Format into a scratch buffer first: callers may pass trn_last_error()
    // itself as an argument.
    char buf[TRN__ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    snprintf(tl_error, sizeof tl_error, "%s", buf);
    return status;
}
