// cub.cpp (CUDA simulator): cub::DeviceRadixSort::SortPairs (include/cub/device/
// device_radix_sort.cuh) on the CPU. Like CUB it is a least-significant-digit radix sort,
// 8 bits a pass over the requested bit range, and its temporary storage holds what CUB's
// does: one digit histogram per pass and an alternate key and value buffer to sort between.
// Using that storage for real means a temporary buffer that is too small, not allocated, or
// shared with live data breaks here as it would on a GPU.
//
// CUB's rules, kept here:
//   - d_temp_storage == NULL: only temp_storage_bytes is set; nothing is read or written;
//   - a signed key has its sign bit inverted first (so keys sort numerically), and
//     [begin_bit, end_bit) selects bits of that transformed key;
//   - the sort is stable; inputs are left unchanged; none of the four arrays may overlap;
//   - temp_storage_bytes below what the size query answered: cudaErrorInvalidValue.
// The sort itself runs in stream order through cudasim::stream_op.
#include <cub/device/device_radix_sort.cuh>
#include <string.h>

#include "order.h"
#include "sim.h"

static const int kDigitBits = 8, kDigits = 1 << kDigitBits;

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// Bytes of temporary storage for n items: 255 bytes of slack to align the start to 256 (as
// CUB does), a histogram of kDigits counters for each pass the key width could need, and the
// alternate key and value buffers. It depends only on the types and n, so a size query with
// one bit range serves a sort with another.
static size_t temp_bytes_needed(size_t n, size_t key_bytes, size_t value_bytes) {
  size_t max_passes = key_bytes * 8 / kDigitBits;
  return 255 + align256(max_passes * kDigits * sizeof(uint32_t)) + align256(n * key_bytes) +
         align256(n * value_bytes);
}

// See cublaslt.cpp: reports a range outside the live allocations, and says whether it is fine.
static bool device_range(const void* p, size_t bytes, const char* what) {
  cudasim::check_device_range(p, bytes, what);
  const cudasim::Allocation* a = cudasim::find_allocation(p);
  return a && (uintptr_t)p >= a->base && (uintptr_t)p - a->base + bytes <= a->bytes;
}

static bool overlap(const void* p, size_t pn, const void* q, size_t qn) {
  uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
  return p && q && pn && qn && a < b + qn && b < a + pn;
}

struct SortJob {
  void* temp;
  size_t temp_bytes;
  const unsigned char* keys_in;
  unsigned char* keys_out;
  const unsigned char* values_in;
  unsigned char* values_out;
  size_t key_bytes, value_bytes, n;
  bool key_signed;
  int begin_bit, end_bit;
};

// The key's bits as an unsigned integer, sign bit inverted for signed keys (CUB's transform).
static uint64_t sort_bits(const unsigned char* keys, size_t i, const SortJob& j) {
  uint64_t u = 0;
  memcpy(&u, keys + i * j.key_bytes, j.key_bytes);  // little-endian host: the low bytes
  if (j.key_signed) u ^= 1ull << (j.key_bytes * 8 - 1);
  return u;
}

static void run_sort(const SortJob& j) {
  bool ok = device_range(j.keys_in, j.n * j.key_bytes, "cub::DeviceRadixSort::SortPairs d_keys_in");
  ok &= device_range(j.keys_out, j.n * j.key_bytes, "cub::DeviceRadixSort::SortPairs d_keys_out");
  ok &= device_range(j.values_in, j.n * j.value_bytes, "cub::DeviceRadixSort::SortPairs d_values_in");
  ok &= device_range(j.values_out, j.n * j.value_bytes, "cub::DeviceRadixSort::SortPairs d_values_out");
  ok &= device_range(j.temp, j.temp_bytes, "cub::DeviceRadixSort::SortPairs d_temp_storage");
  if (!ok) return;  // reported above; sorting would touch memory outside the allocations
  cudasim::order_access(j.keys_in, j.n * j.key_bytes, 0);
  cudasim::order_access(j.values_in, j.n * j.value_bytes, 0);
  cudasim::order_access(j.keys_out, j.n * j.key_bytes, 1);
  cudasim::order_access(j.values_out, j.n * j.value_bytes, 1);
  cudasim::order_access(j.temp, j.temp_bytes, 1);

  // Carve the temporary storage as temp_bytes_needed sized it.
  unsigned char* t = (unsigned char*)(((uintptr_t)j.temp + 255) / 256 * 256);
  uint32_t* hist = (uint32_t*)t;
  t += align256(j.key_bytes * 8 / kDigitBits * kDigits * sizeof(uint32_t));
  unsigned char* alt_keys = t;
  unsigned char* alt_values = t + align256(j.n * j.key_bytes);

  int passes = (j.end_bit - j.begin_bit + kDigitBits - 1) / kDigitBits;
  if (passes == 0) {  // no bits to sort by: the stable order is the input order
    memcpy(j.keys_out, j.keys_in, j.n * j.key_bytes);
    memcpy(j.values_out, j.values_in, j.n * j.value_bytes);
    return;
  }
  const unsigned char* src_k = j.keys_in;
  const unsigned char* src_v = j.values_in;
  for (int p = 0; p < passes; p++) {
    // Alternate so that the last pass writes the outputs; the inputs are only ever read.
    bool to_out = (passes - 1 - p) % 2 == 0;
    unsigned char* dst_k = to_out ? j.keys_out : alt_keys;
    unsigned char* dst_v = to_out ? j.values_out : alt_values;
    int shift = j.begin_bit + p * kDigitBits;
    int width = j.end_bit - shift < kDigitBits ? j.end_bit - shift : kDigitBits;
    uint64_t mask = (1ull << width) - 1;
    uint32_t* h = hist + (size_t)p * kDigits;
    memset(h, 0, kDigits * sizeof *h);
    for (size_t i = 0; i < j.n; i++) h[(sort_bits(src_k, i, j) >> shift) & mask]++;
    uint32_t sum = 0;  // exclusive prefix sums: where each digit's items start
    for (int d = 0; d < kDigits; d++) {
      uint32_t c = h[d];
      h[d] = sum;
      sum += c;
    }
    // Items of one digit keep their relative order: this is what makes the sort stable.
    for (size_t i = 0; i < j.n; i++) {
      uint32_t pos = h[(sort_bits(src_k, i, j) >> shift) & mask]++;
      memcpy(dst_k + pos * j.key_bytes, src_k + i * j.key_bytes, j.key_bytes);
      memcpy(dst_v + pos * j.value_bytes, src_v + i * j.value_bytes, j.value_bytes);
    }
    src_k = dst_k;
    src_v = dst_v;
  }
}

cudaError_t cudasim::cub_sort_pairs(void* d_temp_storage, size_t* temp_storage_bytes, const void* d_keys_in,
                                    void* d_keys_out, const void* d_values_in, void* d_values_out, size_t key_bytes,
                                    bool key_signed, size_t value_bytes, long long num_items, int begin_bit,
                                    int end_bit, cudaStream_t stream) {
  const char* fn = "cub::DeviceRadixSort::SortPairs";
  int key_bits = (int)(key_bytes * 8);
  if (num_items < 0 || (uint64_t)num_items > UINT32_MAX) {  // histogram counters are 32-bit
    report("cub", "%s: num_items = %lld", fn, num_items);
    return cudaErrorInvalidValue;
  }
  if (begin_bit < 0 || end_bit > key_bits || begin_bit > end_bit) {
    report("cub", "%s: bit range [%d, %d) is not within the key's %d bits", fn, begin_bit, end_bit, key_bits);
    return cudaErrorInvalidValue;
  }
  size_t n = (size_t)num_items;
  size_t need = temp_bytes_needed(n, key_bytes, value_bytes);
  if (!d_temp_storage) {
    *temp_storage_bytes = need;
    return cudaSuccess;
  }
  if (*temp_storage_bytes < need) {
    report("cub", "%s: temp_storage_bytes = %zu, but sorting %zu items needs %zu (the size query's answer)", fn,
           *temp_storage_bytes, n, need);
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  if (!d_keys_in || !d_keys_out || !d_values_in || !d_values_out) {
    report("cub", "%s: d_keys_in = %p, d_keys_out = %p, d_values_in = %p, d_values_out = %p: a NULL array", fn,
           d_keys_in, d_keys_out, d_values_in, d_values_out);
    return cudaErrorInvalidValue;
  }
  const struct {
    const char* what;
    const void* p;
    size_t n;
  } r[5] = {{"d_keys_in", d_keys_in, n * key_bytes},
            {"d_keys_out", d_keys_out, n * key_bytes},
            {"d_values_in", d_values_in, n * value_bytes},
            {"d_values_out", d_values_out, n * value_bytes},
            {"d_temp_storage", d_temp_storage, *temp_storage_bytes}};
  for (int a = 0; a < 5; a++)
    for (int b = a + 1; b < 5; b++)
      if (overlap(r[a].p, r[a].n, r[b].p, r[b].n)) {
        report("cub", "%s: %s [%p, +%zu bytes) overlaps %s [%p, +%zu bytes); CUB does not sort in place", fn,
               r[a].what, r[a].p, r[a].n, r[b].what, r[b].p, r[b].n);
        return cudaErrorInvalidValue;
      }

  SortJob j;
  memset(&j, 0, sizeof j);
  j.temp = d_temp_storage;
  j.temp_bytes = *temp_storage_bytes;
  j.keys_in = (const unsigned char*)d_keys_in;
  j.keys_out = (unsigned char*)d_keys_out;
  j.values_in = (const unsigned char*)d_values_in;
  j.values_out = (unsigned char*)d_values_out;
  j.key_bytes = key_bytes;
  j.value_bytes = value_bytes;
  j.n = n;
  j.key_signed = key_signed;
  j.begin_bit = begin_bit;
  j.end_bit = end_bit;
  count_library_call(fn);
  stream_op(stream, fn, [j]() { run_sort(j); });
  return cudaSuccess;
}
