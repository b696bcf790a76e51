// y = a * x + y for the element type the arguments deduce (float, double, ...).
// scripts/rust-bundle-example.sh bakes its float and double instances into the bundle
// the example embeds.
template <typename T>
__global__ void axpy(T a, const T* x, T* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
