"""OpInfo names of the native elementwise ops (libtrn/src/kernels/pointwise/elementwise.c)."""
OPS = {
    # binary
    "add", "sub", "mul", "div", "floor_divide", "remainder", "fmod", "maximum", "minimum",
    "fmax", "fmin", "copysign", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_left_shift", "bitwise_right_shift", "pow", "float_power", "atan2", "hypot",
    "true_divide", "rsub",
    # unary
    "abs", "neg", "sign", "floor", "ceil", "round", "trunc", "frac", "sqrt", "rsqrt",
    "reciprocal", "bitwise_not", "logical_not", "isnan", "isinf", "isfinite", "nan_to_num",
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "logit", "erf", "erfc", "erfinv",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.mish",
    "nn.functional.softplus", "nn.functional.hardtanh", "nn.functional.hardsigmoid",
    "nn.functional.hardswish", "nn.functional.elu", "nn.functional.leaky_relu",
    "nn.functional.relu6", "nn.functional.celu", "nn.functional.selu",
    # ternary
    "where", "clamp", "clamp_min", "clamp_max", "lerp", "addcmul", "addcdiv",
}
