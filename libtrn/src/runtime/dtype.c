// dtype.c - owns the element-size and name tables generated from
// TRN_DTYPE_LIST, so the list in dtype.h stays the only place a dtype is
// described.
#include "../internal.h"

static const size_t dtype_sizes[TRN_DTYPE_COUNT] = {
#define TRN__DTYPE_SIZE(name, size, text) [name] = size,
    TRN_DTYPE_LIST(TRN__DTYPE_SIZE)
#undef TRN__DTYPE_SIZE
};

static const char *const dtype_names[TRN_DTYPE_COUNT] = {
#define TRN__DTYPE_TEXT(name, size, text) [name] = text,
    TRN_DTYPE_LIST(TRN__DTYPE_TEXT)
#undef TRN__DTYPE_TEXT
};

// The enum may be given any int by a caller; compare as unsigned so negative
// values are out of range too.
size_t trn_dtype_size(trn_dtype dtype) {
    return (unsigned)dtype < TRN_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

const char *trn_dtype_name(trn_dtype dtype) {
    return (unsigned)dtype < TRN_DTYPE_COUNT ? dtype_names[dtype] : "invalid";
}
