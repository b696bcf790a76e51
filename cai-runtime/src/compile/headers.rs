//! The device-side headers of `kernels/include`, embedded so an installed wheel has them.
//! Every program can `#include <caijit/...>` them.

/// `(include name, contents)` of every embedded header.
pub const HEADERS: &[(&str, &str)] = &[
    ("caijit/caijit.cuh", include_str!("../../../kernels/include/caijit/caijit.cuh")),
    ("caijit/array.cuh", include_str!("../../../kernels/include/caijit/array.cuh")),
    ("caijit/complex.cuh", include_str!("../../../kernels/include/caijit/complex.cuh")),
    ("caijit/grid.cuh", include_str!("../../../kernels/include/caijit/grid.cuh")),
    ("caijit/vec.cuh", include_str!("../../../kernels/include/caijit/vec.cuh")),
    ("caijit/convert.cuh", include_str!("../../../kernels/include/caijit/convert.cuh")),
];

/// `(name, source)` of every kernel of the library (`kernels/ops/*.cu`), embedded so an
/// installed wheel can compile them (`caijit.ops`).
pub const OPS: &[(&str, &str)] = &[
    ("elementwise", include_str!("../../../kernels/ops/elementwise.cu")),
    ("strided_copy", include_str!("../../../kernels/ops/strided_copy.cu")),
    ("transpose", include_str!("../../../kernels/ops/transpose.cu")),
    ("reduce", include_str!("../../../kernels/ops/reduce.cu")),
    ("softmax", include_str!("../../../kernels/ops/softmax.cu")),
];
