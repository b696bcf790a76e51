//! The device-side headers of `kernels/include`, embedded so an installed wheel has them.
//! Every program can `#include <caijit/...>` them.

/// `(include name, contents)` of every embedded header.
pub const HEADERS: &[(&str, &str)] = &[
    ("caijit/caijit.cuh", include_str!("../../../kernels/include/caijit/caijit.cuh")),
    ("caijit/array.cuh", include_str!("../../../kernels/include/caijit/array.cuh")),
    ("caijit/complex.cuh", include_str!("../../../kernels/include/caijit/complex.cuh")),
    ("caijit/grid.cuh", include_str!("../../../kernels/include/caijit/grid.cuh")),
];
