// device_radix_sort.cuh (CUDA simulator): cub::DeviceRadixSort::SortPairs, the one CUB algorithm
// fsdp.c uses (the token-embedding backward, kernels/cuda/embedding.cu), with CUB's signature
// and semantics: a stable ascending sort of (key, value) pairs by key bits [begin_bit, end_bit),
// signed keys ordered numerically, a size query when d_temp_storage is NULL. Integer keys only.
// The template only checks types; test/cudasim/cub.cpp does the work on the CPU, in stream order.
#ifndef CUDASIM_CUB_DEVICE_RADIX_SORT_CUH
#define CUDASIM_CUB_DEVICE_RADIX_SORT_CUH
#include <stddef.h>

#include <type_traits>

#include <cuda_runtime_api.h>

namespace cudasim {
// SortPairs with the types erased: keys of key_bytes (1, 2, 4 or 8) bytes, signed or not;
// values of value_bytes bytes, moved as they are.
cudaError_t cub_sort_pairs(void* d_temp_storage, size_t* temp_storage_bytes, const void* d_keys_in, void* d_keys_out,
                           const void* d_values_in, void* d_values_out, size_t key_bytes, bool key_signed,
                           size_t value_bytes, long long num_items, int begin_bit, int end_bit, cudaStream_t stream);
}  // namespace cudasim

namespace cub {

struct DeviceRadixSort {
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                               KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out,
                               NumItemsT num_items, int begin_bit = 0, int end_bit = sizeof(KeyT) * 8,
                               cudaStream_t stream = 0) {
    static_assert(std::is_integral<KeyT>::value && !std::is_same<KeyT, bool>::value,
                  "the simulator's DeviceRadixSort sorts integer keys only");
    static_assert(sizeof(KeyT) == 1 || sizeof(KeyT) == 2 || sizeof(KeyT) == 4 || sizeof(KeyT) == 8,
                  "keys of 1, 2, 4 or 8 bytes");
    static_assert(std::is_trivially_copyable<ValueT>::value, "values are moved as bytes");
    static_assert(std::is_integral<NumItemsT>::value, "num_items is an integer");
    return cudasim::cub_sort_pairs(d_temp_storage, &temp_storage_bytes, d_keys_in, d_keys_out, d_values_in,
                                   d_values_out, sizeof(KeyT), std::is_signed<KeyT>::value, sizeof(ValueT),
                                   (long long)num_items, begin_bit, end_bit, stream);
  }
};

}  // namespace cub
#endif
